/* INI line discipline shared by posd's configuration loader and possim's scenario parser
 * (see ini_lines.h). */
#include <errno.h>
#include <string.h>
#include <sys/types.h>

#include "sched/ini_lines.h"

char *ini_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
        end--;
    *end = '\0';
    return s;
}

char *ini_next_line(FILE *fp, char **buf, size_t *cap, int lineno, size_t max, const char **why)
{
    *why = NULL;
    errno = 0;
    ssize_t n = getline(buf, cap, fp);
    if (n < 0)
        return NULL;
    if (memchr(*buf, '\0', (size_t)n)) {
        *why = "the line holds a NUL byte";
        return NULL;
    }
    char *s = *buf;
    if (lineno == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
        s += 3; /* a UTF-8 byte order mark */
    s = ini_trim(s);
    if (strlen(s) > max) {
        *why = "line too long";
        return NULL;
    }
    return s;
}

/* The first character of S that is one of CHARS, or where an inline comment (';' after a
 * blank) or the string ends: how inih splits a line. */
static char *find_or_comment(char *s, const char *chars)
{
    int after_blank = 0;
    for (; *s && !strchr(chars, *s); s++) {
        if (after_blank && *s == ';')
            break;
        after_blank = *s == ' ' || *s == '\t';
    }
    return s;
}

enum ini_line_kind ini_classify(char *s, char *name, size_t cap, const char **why)
{
    if (!*s || *s == ';' || *s == '#')
        return INI_LINE_BLANK;
    if (*s == '[') {
        char *end = find_or_comment(s + 1, "]");
        if (*end != ']') {
            *why = "syntax error: no ']' closes the section name";
            return INI_LINE_ERROR;
        }
        char *rest = end + 1 + strspn(end + 1, " \t");
        if (*rest && *rest != ';' && *rest != '#') {
            *why = "syntax error: text after ']'";
            return INI_LINE_ERROR;
        }
        snprintf(name, cap, "%.*s", (int)(end - s - 1), s + 1);
        return INI_LINE_SECTION;
    }
    if (!*find_or_comment(s, "=:")) {
        *why = "syntax error: expected 'key = value'";
        return INI_LINE_ERROR;
    }
    return INI_LINE_KEY;
}

void ini_escape(char *dst, size_t len, const char *src)
{
    if (!len)
        return;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && n + 5 <= len; p++) {
        if (*p >= 0x20 && *p < 0x7f)
            dst[n++] = (char)*p;
        else
            n += (size_t)snprintf(dst + n, len - n, "\\x%02x", *p);
    }
    dst[n] = '\0';
}
