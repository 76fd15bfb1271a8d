/* The line discipline of posd's INI files (posd.conf, policy.d, possim scenarios), shared by
 * every parser built on libinih: one physical line at a time (so a parser always knows the
 * line of each handler call), a UTF-8 byte order mark dropped, blanks trimmed, and each line
 * classified as inih will read it, because inih itself says only "error" for a malformed line
 * and tells handlers nothing of section headers. */
#ifndef POS_SCHED_INI_LINES_H
#define POS_SCHED_INI_LINES_H

#include <stddef.h>
#include <stdio.h>

enum ini_line_kind {
    INI_LINE_ERROR = -1, /* *WHY says what is wrong */
    INI_LINE_BLANK = 0,  /* empty, or a comment */
    INI_LINE_SECTION,    /* a header: NAME holds what stands between the brackets */
    INI_LINE_KEY,        /* key = value (or key: value) */
};

/* S without leading and trailing blanks (in place). */
char *ini_trim(char *s);

/* The next physical line of FP, LINENO (1 for the first), trimmed, into *BUF (getline's
 * buffer, *CAP its size); at most MAX characters. Returns the line, or NULL at the end of the
 * file or on an error (*WHY set then; left NULL at a clean end, and on a read error errno is
 * kept). */
char *ini_next_line(FILE *fp, char **buf, size_t *cap, int lineno, size_t max, const char **why);

/* Classifies the trimmed line S; a section's name goes into NAME (CAP bytes). */
enum ini_line_kind ini_classify(char *s, char *name, size_t cap, const char **why);

/* SRC into DST (LEN bytes) with every byte that is not printable ASCII as \xNN: bytes of a
 * broken or hostile file, or of a client's environment, must not reach a terminal or a log
 * raw (a newline would forge a line). */
void ini_escape(char *dst, size_t len, const char *src);

#endif
