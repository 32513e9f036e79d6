/* Lesson 12's check: the learner's resharding against the engine's own checkpoints: which saved
 * ranks a loading rank needs, and which rows it reads from each. */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "exercise.h"
#include "io/checkpoint.h"
#include "jobs/train.h"
#include "lessons/tool/check.h"
#include "models/kinds.h"
#include "models/vit.h"
#include "sim/cluster.h"

/* The saved ranks a loading rank needs are checked against intersections of the engine's shard_rows
 * (engine/plan.c) at both world sizes. The reads are checked on real checkpoints: a 2-layer
 * vit-tiny trained one step on N simulated ranks and saved (io/checkpoint.c), then loaded on M
 * ranks by checkpoint_load. For each piece of state a loading rank keeps (engine_save_state hands
 * them over, loaded), the learner's reads must be the rows io/checkpoint.c's fill_piece takes from
 * each saved piece (a static function, so its rule is restated below: every saved piece of the
 * tensor and kind that overlaps, in meta.json's order), and the bytes those reads name in the rank
 * files must be, bit for bit, the floats the engine loaded. */

/* ---------------------------------------------------------------- which saved ranks */

/* The saved ranks whose rows meet rank r's rows at load_world, by the engine's shard_rows. */
static const char *ranks_text(size_t d0, int saved_world, int load_world, int r) {
    size_t begin, rows;
    shard_rows(d0, load_world, r, &begin, &rows);
    int first = 0, count = 0;
    for (int k = 0; k < saved_world; k++) {
        size_t b, n;
        shard_rows(d0, saved_world, k, &b, &n);
        if (b >= begin + rows || begin >= b + n) continue; /* no row in common */
        if (count++ == 0) first = k;
    }
    return lesson_fmt("count=%d first=%d", count, first);
}

/* The known wrong answer: a loading rank reads its own number's file, whatever the world
 * sizes. NULL for any other. */
static const char *ranks_why(int saved_world, int load_world, int r, int count, int first) {
    if (saved_world == load_world || count != 1 || first != r) return NULL;
    return "Rank r's file holds rank r's rows at the saved world size: at another world size a "
           "loading rank's rows lie in the files of the saved ranks whose rows meet them.";
}

static void expect_saved_ranks(int hint, size_t d0, int saved_world, int load_world) {
    for (int r = 0; r < load_world; r++) {
        lesson_try("saved_ranks_to_read(d0=%zu, saved_world=%d, load_world=%d, r=%d)", d0,
                   saved_world, load_world, r);
        int first = -7;
        int count = saved_ranks_to_read(d0, saved_world, load_world, r, &first);
        expect_text_why(hint, ranks_text(d0, saved_world, load_world, r),
                        lesson_fmt("count=%d first=%d", count, first),
                        ranks_why(saved_world, load_world, r, count, first));
    }
}

/* Each test says when it ran to its end (check.h): the runner passes nothing less. */
LESSON_CHECK_SUITE(lesson12);

Test(lesson12, t1_same_world_size) {
    expect_saved_ranks(1, 12, 4, 4); /* each rank reads its own file */
    expect_saved_ranks(1, 384, 3, 3);
    expect_saved_ranks(1, 10, 3, 3);
    expect_saved_ranks(1, 10, 4, 4); /* 3, 3, 3, 1 */
    expect_saved_ranks(1, 3, 4, 4);  /* the last rank keeps nothing, reads nothing */
}

Test(lesson12, t2_other_world_sizes) {
    static const size_t d0s[] = {1, 3, 5, 10, 17, 128, 384};
    for (size_t i = 0; i < sizeof d0s / sizeof d0s[0]; i++)
        for (int n = 1; n <= 6; n++)
            for (int m = 1; m <= 6; m++) expect_saved_ranks(2, d0s[i], n, m);
}

/* ---------------------------------------------------------------- a real save and load */

#define BATCH 2
#define MAX_RANKS 8

/* What a loading rank keeps after checkpoint_load: its pieces, with the loaded values. */
typedef struct Kept {
    int param;
    StateKind kind;
    size_t row_begin, rows, row_elems;
    float *data;
} Kept;

typedef struct Loaded {
    Kept *pieces;
    int n, cap;
} Loaded;

typedef struct Job {
    ModelDesc model;
    FsdpConfig cfg;
    Plan plan; /* at the loading world size */
    char path[4096];
    Loaded ranks[MAX_RANKS];
} Job;

static int keep_piece(void *user, const StatePiece *p, Err *err) {
    Loaded *l = user;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        Kept *grown = realloc(l->pieces, (size_t)l->cap * sizeof *grown);
        if (!grown) return err_set(err, ERR_NOMEM, "out of memory");
        l->pieces = grown;
    }
    size_t bytes = p->rows * p->row_elems * sizeof(float);
    float *copy = malloc(bytes ? bytes : 1);
    if (!copy) return err_set(err, ERR_NOMEM, "out of memory");
    memcpy(copy, p->data, bytes);
    l->pieces[l->n++] = (Kept){p->param, p->kind, p->row_begin, p->rows, p->row_elems, copy};
    return 0;
}

/* Each loading rank: an engine, the checkpoint loaded into it, and what it keeps now. */
static int load_rank(const RankEnv *env, void *arg, Err *err) {
    Job *job = arg;
    Engine *e = NULL;
    long step = 0;
    int rc = engine_create(&e, &job->cfg, &job->plan, &job->model, *env, err);
    if (!rc) rc = checkpoint_load(e, &job->model, &model_kinds, job->path, &step, err);
    if (!rc) rc = engine_save_state(e, keep_piece, &job->ranks[env->rank], err);
    engine_destroy(e);
    return rc;
}

/* Images the ViT can train on: not FashionMNIST (no data set to load), just varied pixels. */
static Dataset pattern_images(long n, uint8_t *pixels, uint8_t *labels) {
    for (long i = 0; i < n * 28 * 28; i++) pixels[i] = (uint8_t)((i * 37 + i / 28) % 251);
    for (long i = 0; i < n; i++) labels[i] = (uint8_t)(i % 10);
    return (Dataset){.n = n,
                     .in_elems = 28 * 28,
                     .target_elems = 1,
                     .pixels = pixels,
                     .labels = labels,
                     .rows = 28,
                     .cols = 28,
                     .classes = 10};
}

static void run_cluster(int ranks, RankMain fn, void *arg) {
    ClusterOptions opt = {.ranks = ranks, .profile = profile_default()};
    ClusterResult res;
    Err err = {0};
    cr_assert_eq(cluster_run(&opt, fn, arg, &res, &err), 0, "%s", err.msg);
    cluster_result_free(&res);
}

/* One step on saved_world ranks, saved into dir (dir/step-00000001): Adam's moments are
 * not zero any more, so reading the wrong rows of them shows too. */
static void train_and_save(Job *job, int saved_world, const char *dir) {
    static uint8_t pixels[MAX_RANKS * BATCH * 28 * 28], labels[MAX_RANKS * BATCH];
    Dataset data = pattern_images((long)saved_world * BATCH, pixels, labels);
    Plan plan;
    Err err = {0};
    cr_assert_eq(fsdp_plan_create(&plan, &job->model, &job->cfg, saved_world, &err), 0, "%s",
                 err.msg);
    TrainJob train = {.model = &job->model,
                      .data = &data,
                      .plan = &plan,
                      .cfg = &job->cfg,
                      .steps = 1,
                      .ckpt_dir = dir,
                      .ckpt_every = 1,
                      .model_name = "vit-tiny"};
    run_cluster(saved_world, train_rank, &train);
    plan_free(&plan);
    snprintf(job->path, sizeof job->path, "%s/step-00000001", dir);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void job_free(Job *job, int load_world) {
    for (int r = 0; r < load_world; r++) {
        for (int i = 0; i < job->ranks[r].n; i++) free(job->ranks[r].pieces[i].data);
        free(job->ranks[r].pieces);
    }
    plan_free(&job->plan);
    model_desc_free(&job->model);
}

/* ---------------------------------------------------------------- the reads */

/* The saved pieces of one tensor and kind, in meta.json's order, as the learner gets them. */
static int pieces_of(const CkptMeta *meta, int tensor, StateKind kind, SavedPiece *out) {
    int n = 0;
    for (size_t i = 0; i < meta->npieces; i++) {
        const CkptPiece *p = &meta->pieces[i];
        if (p->tensor == tensor && p->kind == kind)
            out[n++] = (SavedPiece){p->rank, p->row_begin, p->rows, p->offset};
    }
    return n;
}

/* The reads fill_piece makes: from every piece that overlaps the wanted rows, those rows. */
static int engine_reads(const SavedPiece *saved, int n, const Kept *want, RowRead *reads) {
    int count = 0;
    for (int i = 0; i < n; i++) {
        size_t lo = saved[i].row_begin > want->row_begin ? saved[i].row_begin : want->row_begin;
        size_t hi_saved = saved[i].row_begin + saved[i].rows;
        size_t hi_want = want->row_begin + want->rows;
        size_t hi = hi_saved < hi_want ? hi_saved : hi_want;
        if (lo >= hi) continue;
        reads[count++] =
            (RowRead){saved[i].rank,
                      saved[i].offset + (lo - saved[i].row_begin) * want->row_elems * sizeof(float),
                      hi - lo, lo - want->row_begin};
    }
    return count;
}

static const char *reads_text(const RowRead *reads, int n) {
    char text[LESSON_TEXT_MAX] = "";
    size_t at = 0;
    for (int i = 0; i < n && at < sizeof text; i++)
        at += (size_t)snprintf(text + at, sizeof text - at,
                               "%s{rank %d, offset %llu, %zu rows, into %zu}", i ? " " : "",
                               reads[i].rank, reads[i].offset, reads[i].rows, reads[i].into_row);
    return lesson_fmt("%d read%s: %s", n, n == 1 ? "" : "s", n ? text : "none");
}

/* The saved rank files, read into memory before the checkpoint is removed: a failed
 * expectation ends the test at once, and must not leave files behind. */
typedef struct RankFiles {
    unsigned char *bytes[MAX_RANKS];
    size_t size[MAX_RANKS];
    int n;
} RankFiles;

static void read_rank_files(const CkptMeta *meta, RankFiles *files) {
    files->n = meta->world;
    for (int k = 0; k < meta->world; k++) {
        char path[4200];
        ckpt_rank_file(meta, k, path, sizeof path);
        FILE *f = fopen(path, "rb");
        cr_assert(f, "cannot open %s", path);
        cr_assert_eq(fseek(f, 0, SEEK_END), 0);
        files->size[k] = (size_t)ftell(f);
        rewind(f);
        files->bytes[k] = malloc(files->size[k] + 1);
        cr_assert(files->bytes[k]);
        cr_assert_eq(fread(files->bytes[k], 1, files->size[k], f), files->size[k]);
        fclose(f);
    }
}

static void rank_files_free(RankFiles *files) {
    for (int k = 0; k < files->n; k++) free(files->bytes[k]);
}

/* Does what `reads` say, on the saved rank files, into out (the kept piece's rows); returns
 * "" or what went wrong. */
static const char *do_reads(const RankFiles *files, const RowRead *reads, int n, size_t row_elems,
                            float *out) {
    for (int i = 0; i < n; i++) {
        const RowRead *rd = &reads[i];
        size_t bytes = rd->rows * row_elems * sizeof(float);
        if (rd->rank < 0 || rd->rank >= files->n)
            return lesson_fmt("read %d names rank %d, but %d ranks saved", i, rd->rank, files->n);
        if (rd->offset > files->size[rd->rank] || bytes > files->size[rd->rank] - rd->offset)
            return lesson_fmt("rank-%05d.bin has %zu bytes: no %zu rows at offset %llu", rd->rank,
                              files->size[rd->rank], rd->rows, rd->offset);
        memcpy(out + rd->into_row * row_elems, files->bytes[rd->rank] + rd->offset, bytes);
    }
    return "";
}

static void expect_piece_reads(const CkptMeta *meta, const RankFiles *files, int load_world, int r,
                               const Kept *want) {
    int saved_world = meta->world;
    const CkptTensor *t = &meta->tensors[want->param];
    SavedPiece saved[MAX_RANKS];
    int nsaved = pieces_of(meta, want->param, want->kind, saved);
    RowRead expected[MAX_RANKS], got[MAX_RANKS];
    int nexpected = engine_reads(saved, nsaved, want, expected);

    lesson_try("saved_ranks_to_read(d0=%lld, saved_world=%d, load_world=%d, r=%d) for %s",
               (long long)t->shape[0], saved_world, load_world, r, t->name);
    int first = -7,
        count = saved_ranks_to_read((size_t)t->shape[0], saved_world, load_world, r, &first);
    expect_text_why(2, lesson_fmt("count=%d first=%d", nexpected, nexpected ? expected[0].rank : 0),
                    lesson_fmt("count=%d first=%d", count, first),
                    ranks_why(saved_world, load_world, r, count, first));

    for (int i = 0; i < MAX_RANKS; i++) got[i] = (RowRead){-1, 0, 0, 0};
    lesson_try("plan_reads(%s's %s, %d pieces saved by %d ranks, row_elems=%zu, want rows %zu-%zu "
               "of rank %d of %d)",
               t->name, state_kind_name(want->kind), nsaved, saved_world, want->row_elems,
               want->row_begin, want->row_begin + want->rows, r, load_world);
    int ngot = plan_reads(saved, nsaved, want->row_elems, want->row_begin, want->rows, got);
    if (ngot < 0 || ngot > nsaved) ngot = ngot < 0 ? 0 : nsaved;
    expect_text(3, reads_text(expected, nexpected), reads_text(got, ngot));

    size_t n = want->rows * want->row_elems;
    float *read = malloc(n * sizeof(float) + 1);
    cr_assert(read);
    for (size_t i = 0; i < n; i++) read[i] = NAN;
    const char *problem = do_reads(files, got, ngot, want->row_elems, read);
    expect_no_problem(4, problem);
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&want->data[i], &read[i], sizeof(float)) == 0) continue;
        double w = want->data[i], g = read[i];
        free(read);
        size_t row = want->row_begin + i / want->row_elems;
        lesson_fail(4,
                    lesson_fmt("row %zu's element %zu=%.9g, as checkpoint_load read it", row,
                               i % want->row_elems, w),
                    lesson_fmt("%.9g%s", g, isnan(g) ? " (no read wrote it)" : ""));
    }
    free(read);
}

static void expect_reshard(int saved_world, int load_world) {
    char dir[] = "/tmp/fsdp_lesson12_XXXXXX";
    cr_assert(mkdtemp(dir));
    static Job job;
    memset(&job, 0, sizeof job);
    VitConfig c;
    Err err = {0};
    cr_assert_eq(vit_preset("vit-tiny", &c), 0);
    c.layers = 2;
    cr_assert_eq(vit_model_create(&job.model, &c, &err), 0, "%s", err.msg);
    fsdp_config_defaults(&job.cfg);
    job.cfg.batch_size = BATCH;
    train_and_save(&job, saved_world, dir);
    cr_assert_eq(fsdp_plan_create(&job.plan, &job.model, &job.cfg, load_world, &err), 0, "%s",
                 err.msg);
    run_cluster(load_world, load_rank, &job);
    CkptMeta meta;
    cr_assert_eq(ckpt_meta_read(&meta, job.path, &model_kinds, &job.model, &err), 0, "%s", err.msg);
    RankFiles files;
    read_rank_files(&meta, &files);
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    for (int r = 0; r < load_world; r++)
        for (int i = 0; i < job.ranks[r].n; i++)
            expect_piece_reads(&meta, &files, load_world, r, &job.ranks[r].pieces[i]);
    rank_files_free(&files);
    ckpt_meta_free(&meta);
    job_free(&job, load_world);
}

Test(lesson12, t3_a_real_checkpoint) {
    expect_reshard(3, 3); /* the same world: each rank reads its own pieces whole */
    expect_reshard(3, 2);
    expect_reshard(2, 3);
    expect_reshard(4, 3);
    expect_reshard(1, 4);
    expect_reshard(4, 1);
}
