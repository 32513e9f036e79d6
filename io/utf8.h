/* utf8: checking UTF-8 one sequence at a time, for the writers (JSON traces, SVG pictures) that
 * must emit valid UTF-8 whatever bytes a user's names contain. Pure function, no state. */
#ifndef FSDP_UTF8_H
#define FSDP_UTF8_H

#include <stdio.h>

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not valid UTF-8 (overlong
 * forms, surrogates and code points past U+10FFFF included); stops at a terminating NUL. */
int utf8_sequence_length(const unsigned char *s);

/* Writes text to f as valid UTF-8: every valid sequence as it is, except a one-byte one for which
 * escape(c, room) returns text (it may write into room), written as that text; every byte that
 * starts no valid sequence as `invalid`. */
typedef const char *(*Utf8Escape)(unsigned char c, char room[8]);
void utf8_write_escaped(FILE *f, const char *text, Utf8Escape escape, const char *invalid);

#endif
