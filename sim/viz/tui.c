#include "tui.h"

#include <curses.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/report.h"
#include "plain.h"

enum { MIN_COLS = 60, MIN_ROWS = 12, CELL = 200 };

typedef struct Viewer {
    const Trace *t;
    const Plan *p;
    Frame f;
    size_t index;
    size_t top; /* the largest rank peak of the whole trace: the memory bars' full scale */
    int playing, delay_ms, help, colour;
} Viewer;

/* Prints s at (y, x), cut to the screen's width (UTF-8 aware through ncursesw). */
static void put(int y, int x, const char *s) {
    if (y >= LINES) return;
    mvaddnstr(y, x, s, -1);
    clrtoeol();
}

/* The narration, wrapped at word boundaries over up to `rows` lines; returns lines used. */
static int wrapped(int y, const char *s, int rows) {
    int used = 0, width = COLS - 2;
    while (*s && used < rows) {
        int take = 0, cut = 0, cols = 0;
        for (const char *c = s; *c && cols < width; c++, take++) {
            if (((unsigned char)*c & 0xC0) != 0x80) cols++;
            if (*c == ' ') cut = take;
        }
        if (!s[take] || !cut) cut = take;
        char line[512];
        snprintf(line, sizeof line, "%.*s", cut, s);
        put(y + used++, 1, line);
        s += cut;
        while (*s == ' ') s++;
    }
    return used;
}

static void draw_header(Viewer *v) {
    const TraceEvent *e = v->f.event;
    char line[256];
    snprintf(line, sizeof line, " event %zu/%zu  step %d  %s  GPU %d  %s %s%s ", v->index + 1,
             v->t->n, e->step + 1, phase_name((Phase)e->phase), e->rank,
             event_kind_name((EventKind)e->kind),
             e->unit >= 0 && e->unit < v->p->nunits ? v->p->units[e->unit].name : "",
             v->playing ? "  [playing]" : "");
    attron(A_REVERSE);
    put(0, 0, line);
    attroff(A_REVERSE);
}

static void draw_grid(Viewer *v, int y) {
    size_t width = plain_cell_width(&v->f, v->p) + 2;
    char text[CELL];
    move(y, 9);
    clrtoeol();
    for (int u = 0; u < v->p->nunits; u++)
        mvaddstr(y, 9 + (int)(width * (size_t)u), v->p->units[u].name);
    for (int r = 0; r < v->f.nranks && y + 1 + r < LINES - 2; r++) {
        char label[24];
        snprintf(label, sizeof label, " GPU %d", r);
        put(y + 1 + r, 0, label);
        for (int u = 0; u < v->p->nunits; u++) {
            int x = 9 + (int)(width * (size_t)u);
            if (x >= COLS) break;
            plain_cell_text(&v->f, v->p, r, u, text, CELL);
            int gathered = frame_cell(&v->f, r, u)->gathered;
            if (gathered) attron(v->colour ? COLOR_PAIR(1) : A_BOLD);
            mvaddstr(y + 1 + r, x, text);
            if (gathered) attroff(v->colour ? COLOR_PAIR(1) : A_BOLD);
        }
    }
}

/* One letter per memory category in the stacked bars, in MemCategory order. */
static const char bar_letter[MEM_CATEGORY_COUNT] = {'P', 'U', 'G', 'g', 'O', 'A', 'C', 'H'};

/* What one rank would hold at rest under DDP: every parameter, its gradient and Adam's two
 * moments, in fp32. */
static size_t ddp_bytes(const Plan *p) {
    return p->model->total_numel * 4 * sizeof(float);
}

/* One bar per rank, stacked by category (a letter each), on a scale that fits the run's
 * largest peak and the DDP figure, which a '|' marks. */
static void draw_memory(Viewer *v, int y) {
    size_t ddp = ddp_bytes(v->p), top = v->top > ddp ? v->top : ddp;
    int bar = COLS - 36 > 10 ? COLS - 36 : 10;
    int mark = (int)((double)bar * (double)ddp / (double)(top ? top : 1));
    put(y, 1, "memory: P shard U gathered G grad g full grad O optim A act C comm H host |DDP");
    for (int r = 0; r < v->f.nranks && y + 1 + r < LINES - 1; r++) {
        char line[600], a[32], b[32];
        int at = snprintf(line, sizeof line, " GPU %-2d [", r), filled = 0;
        size_t used = 0, below = 0;
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++) used += frame_mem(&v->f, r, (MemCategory)c);
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
            below += frame_mem(&v->f, r, (MemCategory)c);
            int upto = (int)((double)bar * (double)below / (double)(top ? top : 1));
            for (; filled < upto && filled < bar; filled++) line[at++] = bar_letter[c];
        }
        for (; filled < bar; filled++) line[at++] = '.';
        if (mark >= 0 && mark < bar) line[10 + mark] = '|'; /* " GPU nn  [" is 10 wide */
        snprintf(line + at, sizeof line - (size_t)at, "] %s (peak %s)",
                 format_bytes(used, a, sizeof a), format_bytes(v->f.peak[r], b, sizeof b));
        put(y + 1 + r, 0, line);
    }
}

/* Each rank's compute and comm streams over the step, a 'v' over the current event, when the
 * screen has the rows for it (it is the first panel dropped on a small terminal). */
static void draw_timeline(Viewer *v, int y) {
    if (y + 1 + 2 * v->f.nranks >= LINES - 1) return;
    char line[128];
    put(y, 1, "timeline of the step  # compute  = comm");
    snprintf(line, sizeof line, "%*s", 16 + v->f.cursor + 1, "v"); /* rows start 16 in */
    put(y + 1, 0, line);
    for (int r = 0; r < v->f.nranks; r++) {
        snprintf(line, sizeof line, " GPU %-2d compute %s", r,
                 v->f.timeline[r * STREAM_COUNT + STREAM_COMPUTE]);
        put(y + 2 + 2 * r, 0, line);
        snprintf(line, sizeof line, "        comm    %s",
                 v->f.timeline[r * STREAM_COUNT + STREAM_COMM]);
        put(y + 3 + 2 * r, 0, line);
    }
}

static void draw_help(void) {
    static const char *const lines[] = {
        "keys",
        "  n, space, right   next event",
        "  p, left           previous event",
        "  f / b             next event in forward / backward",
        "  g                 go to an event (type its number, Enter)",
        "  r                 play / pause;  + / -  faster / slower",
        "  h                 this help (any key closes it)",
        "  q                 quit",
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) put(2 + (int)i, 2, lines[i]);
}

static void draw(Viewer *v, Err *err) {
    erase();
    if (COLS < MIN_COLS || LINES < MIN_ROWS) {
        char msg[128];
        snprintf(msg, sizeof msg, "too small: %dx%d, needs %dx%d", COLS, LINES, MIN_COLS, MIN_ROWS);
        put(0, 0, msg);
        refresh();
        return;
    }
    if (frame_at(&v->f, v->t, v->p, v->index, err)) return;
    draw_header(v);
    if (v->help) {
        draw_help();
    } else {
        int y = 2 + wrapped(2, v->f.narration, 3);
        if (v->f.flow[0]) {
            attron(A_BOLD);
            y += wrapped(y, v->f.flow, 2);
            attroff(A_BOLD);
        }
        y++;
        draw_grid(v, y);
        draw_memory(v, y + v->f.nranks + 2);
        draw_timeline(v, y + 2 * v->f.nranks + 4);
    }
    attron(A_DIM);
    put(LINES - 1, 0, " n next  p prev  f/b phase  g go  r play  h help  q quit");
    attroff(A_DIM);
    refresh();
}

/* The next event after the current one in `phase`, or the current one if there is none. */
static size_t next_in_phase(const Viewer *v, int phase) {
    for (size_t i = v->index + 1; i < v->t->n; i++)
        if (v->t->ev[i].phase == phase && v->t->ev[i - 1].phase != phase) return i;
    for (size_t i = v->index + 1; i < v->t->n; i++)
        if (v->t->ev[i].phase == phase) return i;
    return v->index;
}

static void go_to(Viewer *v) {
    char buf[32] = {0};
    put(LINES - 1, 0, " go to event: ");
    echo();
    curs_set(1);
    timeout(-1);
    getnstr(buf, sizeof buf - 1);
    noecho();
    curs_set(0);
    unsigned long k = strtoul(buf, NULL, 10);
    if (k >= 1 && k <= v->t->n) v->index = k - 1;
}

/* Handles one key; returns 0 to quit. */
static int on_key(Viewer *v, int key) {
    if (v->help && key != ERR) {
        v->help = 0;
        return 1;
    }
    switch (key) {
    case 'q':
        return 0;
    case 'n':
    case ' ':
    case KEY_RIGHT:
        if (v->index + 1 < v->t->n) v->index++;
        break;
    case 'p':
    case KEY_LEFT:
        if (v->index > 0) v->index--;
        break;
    case 'f':
        v->index = next_in_phase(v, PHASE_FORWARD);
        break;
    case 'b':
        v->index = next_in_phase(v, PHASE_BACKWARD);
        break;
    case 'g':
        go_to(v);
        break;
    case 'r':
        v->playing = !v->playing;
        break;
    case '+':
        v->delay_ms = v->delay_ms > 50 ? v->delay_ms / 2 : 25;
        break;
    case '-':
        v->delay_ms = v->delay_ms < 4000 ? v->delay_ms * 2 : 8000;
        break;
    case 'h':
        v->help = 1;
        break;
    case ERR: /* the play timer */
        if (v->playing && v->index + 1 < v->t->n)
            v->index++;
        else
            v->playing = 0;
        break;
    default:
        break;
    }
    return 1;
}

int tui_run(const Trace *t, const Plan *p, Err *err) {
    if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO))
        return err_set(err, ERR_USAGE, "the viewer needs a terminal (use --plain)");
    if (!t->n) return err_set(err, ERR_USAGE, "the trace has no events");
    Viewer v = {.t = t, .p = p, .delay_ms = 400};
    int rc = frame_init(&v.f, p, err);
    if (!rc) rc = frame_at(&v.f, t, p, t->n - 1, err);
    for (int r = 0; !rc && r < v.f.nranks; r++)
        if (v.f.peak[r] > v.top) v.top = v.f.peak[r];
    if (rc) {
        frame_free(&v.f);
        return rc;
    }
    setlocale(LC_ALL, "");
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    v.colour = has_colors() && !getenv("NO_COLOR");
    if (v.colour) {
        start_color();
        use_default_colors();
        init_pair(1, COLOR_YELLOW, -1);
    }
    for (;;) {
        draw(&v, err);
        if (err->code) break;
        timeout(v.playing ? v.delay_ms : -1);
        if (!on_key(&v, getch())) break;
    }
    endwin();
    frame_free(&v.f);
    return err->code ? err->code : 0;
}
