/* The defined functions of a shared library's dynamic symbol table, read with libelf: what a
 * program can dlsym from it. */
#ifndef POS_TESTS_UNIT_ELF_SYMBOLS_H
#define POS_TESTS_UNIT_ELF_SYMBOLS_H

#include <fcntl.h>
#include <gelf.h>
#include <string.h>
#include <unistd.h>

/* Calls FN(NAME, ARG) for each defined function of PATH whose name starts with PREFIX.
 * Returns how many there were, or -1 if PATH cannot be read as ELF. */
static inline int elf_each_function(const char *path, const char *prefix,
                                    void (*fn)(const char *name, void *arg), void *arg)
{
    if (elf_version(EV_CURRENT) == EV_NONE)
        return -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    if (!e) {
        close(fd);
        return -1;
    }
    int n = 0;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(e, scn)) != NULL;) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM)
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        for (size_t k = 0; data && k < sh.sh_size / sh.sh_entsize; k++) {
            GElf_Sym sym;
            gelf_getsym(data, (int)k, &sym);
            const char *name = elf_strptr(e, sh.sh_link, sym.st_name);
            if (!name || strncmp(name, prefix, strlen(prefix)) != 0 || sym.st_shndx == SHN_UNDEF ||
                GELF_ST_TYPE(sym.st_info) != STT_FUNC)
                continue;
            n++;
            fn(name, arg);
        }
    }
    elf_end(e);
    close(fd);
    return n;
}

#endif
