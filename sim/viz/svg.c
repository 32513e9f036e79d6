/* svg: XML text and axis ticks for the standalone SVG pictures (memory.svg, curves.svg). */
#include "sim/viz/svg.h"

#include <math.h>

#include "io/utf8.h"

/* XML's five entities; a control character (none is allowed in XML 1.0 text) as a space. */
static const char *xml_escape(unsigned char c, char room[8]) {
    (void)room;
    switch (c) {
    case '&':
        return "&amp;";
    case '<':
        return "&lt;";
    case '>':
        return "&gt;";
    case '"':
        return "&quot;";
    case '\'':
        return "&apos;";
    default:
        return c < 0x20 ? " " : NULL;
    }
}

void svg_text(FILE *f, const char *text) {
    utf8_write_escaped(f, text, xml_escape, "&#xFFFD;");
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
