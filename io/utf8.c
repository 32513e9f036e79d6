/* utf8: checking UTF-8 one sequence at a time, so the JSON and SVG writers emit valid UTF-8
 * whatever bytes a user's names contain. */
#include "io/utf8.h"

int utf8_sequence_length(const unsigned char *s) {
    int len;
    unsigned min, cp;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xE0) == 0xC0)
        len = 2, min = 0x80, cp = s[0] & 0x1F;
    else if ((s[0] & 0xF0) == 0xE0)
        len = 3, min = 0x800, cp = s[0] & 0x0F;
    else if ((s[0] & 0xF8) == 0xF0)
        len = 4, min = 0x10000, cp = s[0] & 0x07;
    else
        return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the terminating NUL */
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

void utf8_write_escaped(FILE *f, const char *text, Utf8Escape escape, const char *invalid) {
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        int len = utf8_sequence_length(s);
        char room[8];
        const char *as = len == 0 ? invalid : len == 1 ? escape(*s, room) : NULL;
        if (as)
            fputs(as, f);
        else
            fwrite(s, 1, (size_t)len, f);
        s += len ? len : 1;
    }
}
