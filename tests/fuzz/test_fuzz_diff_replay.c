/*
 * test_fuzz_diff_replay.c — the corpus replay ctest of the differential and hidden-value fuzz targets
 * (fuzz_diff_*.c, fuzz_hidden.c; docs/ROBUSTNESS.md "Differential and hidden-value fuzzing"), built without
 * libFuzzer: runs each target's one-input function on every file of tests/fuzz/corpus/<target>/ (diff_dense, ...,
 * hidden) (a finding prints the case and aborts, which fails the test). A target whose corpus directory is missing,
 * empty, or has no file that runs a case fails the test. ATTN_FUZZ_MUTATIONS=N also replays N seeded byte mutations per
 * file. test_fuzz_diff_replay [CORPUS_ROOT]            replay every target (default: the in-tree corpus)
 *   test_fuzz_diff_replay --target NAME PATH...    replay files or directories with one target (e.g. the
 *                                                  defect inputs of tests/fuzz/findings/)
 *   test_fuzz_diff_replay --generate NAME DIR N    write up to N random inputs that run a case, at most 3 per
 *                                                  case kind (how the seeds were made)
 */
#define _POSIX_C_SOURCE 200809L /* dirent, stat */
#include <dirent.h>
#include <sys/stat.h>

#define FZ_NO_MAIN
#include "fuzz_diff_cache.c"     /* NOLINT */
#include "fuzz_diff_dense.c"     /* NOLINT: the targets themselves */
#include "fuzz_diff_merge.c"     /* NOLINT */
#include "fuzz_diff_paged.c"     /* NOLINT */
#include "fuzz_diff_piecewise.c" /* NOLINT */
#include "fuzz_diff_quant.c"     /* NOLINT */
#include "fuzz_diff_varlen.c"    /* NOLINT */
#include "fuzz_hidden.c"         /* NOLINT */

typedef struct fzd_replay_target {
    const char *name;
    int (*run)(const uint8_t *, size_t);
} fzd_replay_target;
static const fzd_replay_target fzd_all[] = {
    {"diff_dense", fzd_dense_run},         {"diff_merge", fzd_merge_run},   {"diff_paged", fzd_paged_run},
    {"diff_piecewise", fzd_piecewise_run}, {"diff_varlen", fzd_varlen_run}, {"diff_quant", fzd_quant_run},
    {"diff_cache", fzd_cache_run},         {"hidden", fzd_hidden_run},
};
#define FZD_NUM ((int)(sizeof fzd_all / sizeof fzd_all[0]))

#ifndef ATTN_FUZZ_CORPUS
#define ATTN_FUZZ_CORPUS "tests/fuzz/corpus"
#endif

static int ran_cases;

static int replay_file(const fzd_replay_target *t, const char *path, uint64_t seed, int mutations) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    uint8_t buf[4096];
    const size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    t->run(buf, n);
    ran_cases += fzd_kind != 0;
    if (getenv("ATTN_FUZZ_VERBOSE"))
        printf("%s: kind %d: %s\n", path, fzd_kind, fzd_desc);
    th_rng r;
    th_rng_seed(&r, seed);
    uint8_t m[4096];
    for (int i = 0; i < mutations && n > 0; i++) {
        memcpy(m, buf, n);
        const int edits = 1 + (int)th_rng_int(&r, 0, 3);
        for (int e = 0; e < edits; e++)
            m[th_rng_int(&r, 0, (int64_t)n - 1)] = (uint8_t)th_rng_int(&r, 0, 255);
        t->run(m, n);
    }
    return 1;
}

static int replay_path(const fzd_replay_target *t, const char *path, int mutations, uint64_t *seed) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "test_fuzz_diff_replay: cannot open %s\n", path);
        return 0;
    }
    if (!S_ISDIR(sb.st_mode))
        return replay_file(t, path, (*seed)++, mutations);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        files += replay_file(t, p, (*seed)++, mutations);
    }
    closedir(d);
    return files;
}

static const fzd_replay_target *select_target(const char *name) {
    for (int i = 0; i < FZD_NUM; i++)
        if (strcmp(fzd_all[i].name, name) == 0)
            return &fzd_all[i];
    fprintf(stderr, "unknown target %s\n", name);
    return NULL;
}

static int generate(const fzd_replay_target *t, const char *dir, int want) {
    th_rng r;
    th_rng_seed(&r, 2027);
    int found = 0, seen[256] = {0};
    uint8_t buf[256];
    for (long tries = 0; tries < 200000 && found < want; tries++) {
        const size_t n = 24 + (size_t)th_rng_int(&r, 0, 40);
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)th_rng_int(&r, 0, 255);
        jmp_buf jb;
        fzd_on_finding = &jb;
        if (setjmp(jb) != 0)
            continue; /* a finding (the buffers of that input leak): not a seed */
        t->run(buf, n);
        fzd_on_finding = NULL;
        if (fzd_kind <= 0 || seen[fzd_kind & 255] >= 3)
            continue;
        seen[fzd_kind & 255]++;
        char path[1024];
        snprintf(path, sizeof path, "%s/seed-%02d-%d", dir, fzd_kind & 255, seen[fzd_kind & 255]);
        FILE *fp = fopen(path, "wb");
        if (fp)
            fwrite(buf, 1, n, fp), fclose(fp), found++;
    }
    printf("generated %d inputs\n", found);
    return 0;
}

int main(int argc, char **argv) {
    const char *env = getenv("ATTN_FUZZ_MUTATIONS");
    const int mutations = env ? atoi(env) : 0;
    uint64_t seed = 1;
    if (argc >= 5 && strcmp(argv[1], "--generate") == 0) {
        const fzd_replay_target *t = select_target(argv[2]);
        return t ? generate(t, argv[3], atoi(argv[4])) : 1;
    }
    if (argc >= 4 && strcmp(argv[1], "--target") == 0) {
        const fzd_replay_target *t = select_target(argv[2]);
        if (!t)
            return 1;
        int files = 0;
        ran_cases = 0;
        for (int i = 3; i < argc; i++)
            files += replay_path(t, argv[i], mutations, &seed);
        printf("test_fuzz_diff_replay: %s: %d files (%d run a case): no finding\n", argv[2], files, ran_cases);
        return files > 0 ? 0 : 1;
    }
    const char *root = argc > 1 ? argv[1] : ATTN_FUZZ_CORPUS;
    fzd_init_tables();
    printf("test_fuzz_diff_replay: kernel tables:");
    for (int i = 0; i < fzd_ntables; i++)
        printf(" %s%s", fzd_tables[i].name, fzd_tables[i].opt_in ? " (opt-in)" : "");
    printf("; compiled opt-in tables not usable here:");
    for (int32_t i = 0; attn_isa_opt_in_name(i) != NULL; i++)
        if (!attn_isa_available(attn_isa_opt_in_name(i)))
            printf(" %s", attn_isa_opt_in_name(i));
    printf("\n");
    int bad = 0;
    for (int i = 0; i < FZD_NUM; i++) {
        char dir[2048];
        snprintf(dir, sizeof dir, "%s/%s", root, fzd_all[i].name);
        ran_cases = 0;
        const int files = replay_path(&fzd_all[i], dir, mutations, &seed);
        printf("test_fuzz_diff_replay: %-16s %3d corpus files (%3d run a case), %d mutations each: no finding\n",
               fzd_all[i].name, files, ran_cases, mutations);
        if (files == 0 || ran_cases == 0)
            fprintf(stderr, "test_fuzz_diff_replay: %s: no usable corpus\n", fzd_all[i].name);
        bad += files == 0 || ran_cases == 0;
    }
    return bad ? 1 : 0;
}
