/* svg: XML text and axis ticks for the standalone SVG pictures (memory.svg, curves.svg). */
#include "sim/viz/svg.h"

#include <math.h>

#include "io/utf8.h"

void svg_text(FILE *f, const char *text) {
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        int len = utf8_sequence_length(s);
        if (len == 0) {
            fputs("&#xFFFD;", f);
            s++;
            continue;
        }
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            if (*s < 0x20)
                fputc(' ', f);
            else
                fwrite(s, 1, (size_t)len, f);
        }
        s += len;
    }
}

double svg_nice_step(double x) {
    if (!(x > 0)) return 1;
    double p = pow(10, floor(log10(x)));
    double m = x / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

int svg_decimals_for(double step) {
    int d = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    return d > 6 ? 6 : d;
}

void svg_begin(FILE *f, int width, int height) {
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
            width, height, width, height, width, height);
}
