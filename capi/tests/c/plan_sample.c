/*
 * A C program over the memplan C ABI (capi/include/memplan.h): plans a graph, reads the alloc
 * offsets and the peak out of the plan JSON with plain string scanning, checks the plan, makes
 * one bad call, and frees every string the library returned.
 *
 *   plan_sample GRAPH.json [OPTIONS_JSON]      (options default: {"effort":1})
 *
 * Prints one `key value` line per figure (capi/tests/c_program.rs compares them with the plan
 * the pipeline gives in Rust). Exit status 0 when every call answered as expected.
 */
#include "memplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file at `path`, NUL-terminated (NULL on failure). */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1) {
            break;
        }
        cap *= 2;
        char *bigger = realloc(buf, cap);
        if (bigger == NULL) {
            free(buf);
        }
        buf = bigger;
    }
    if (buf != NULL) {
        if (ferror(f)) {
            free(buf);
            buf = NULL;
        } else {
            buf[len] = '\0';
        }
    }
    fclose(f);
    return buf;
}

/* After the key `"name"` at or after `from`: the first character of its value (NULL if none). */
static const char *value_of(const char *from, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\"", name);
    const char *p = strstr(from, key);
    if (p == NULL) {
        return NULL;
    }
    p += strlen(key);
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ':') {
        p++;
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s GRAPH.json [OPTIONS_JSON]\n", argv[0]);
        return 2;
    }
    const char *options = argc > 2 ? argv[2] : "{\"effort\":1}";
    char *graph = read_file(argv[1]);
    if (graph == NULL) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    int failed = 0;
    printf("version %s\n", memplan_version());

    /* Plan. */
    char *plan = NULL, *err = NULL;
    int32_t code = memplan_plan(graph, options, &plan, &err);
    printf("plan_code %d\n", (int)code);
    if (code != MEMPLAN_OK) {
        printf("plan_error %s\n", err);
        memplan_free(err);
        free(graph);
        return 1;
    }

    /* The alloc instructions' offsets: each `"op": "alloc"` object, then its "offset". */
    unsigned long long count = 0, max_offset = 0;
    printf("offsets");
    for (const char *p = plan; (p = value_of(p, "op")) != NULL;) {
        if (strncmp(p, "\"alloc\"", 7) != 0) {
            continue;
        }
        const char *v = value_of(p, "offset");
        if (v == NULL) {
            break;
        }
        unsigned long long offset = strtoull(v, NULL, 10);
        printf("%c%llu", count == 0 ? ' ' : ',', offset);
        if (offset > max_offset) {
            max_offset = offset;
        }
        count++;
        p = v;
    }
    printf("\n");
    printf("allocs %llu\n", count);
    printf("max_offset %llu\n", max_offset);
    const char *stats = value_of(plan, "stats");
    const char *peak = stats != NULL ? value_of(stats, "peak_bytes") : NULL;
    printf("peak_bytes %llu\n", peak != NULL ? strtoull(peak, NULL, 10) : 0ULL);

    /* Check the plan. */
    char *report = NULL;
    code = memplan_check(graph, plan, &report, &err);
    printf("check_code %d\n", (int)code);
    if (code == MEMPLAN_OK) {
        const char *v = value_of(report, "peak_bytes");
        printf("check_peak_bytes %llu\n", v != NULL ? strtoull(v, NULL, 10) : 0ULL);
        printf("check_report %s\n", report);
    } else {
        printf("check_error %s\n", err);
        failed = 1;
    }
    memplan_free(report);
    memplan_free(err);

    /* One bad call: a graph that is not JSON. */
    char *none = NULL;
    err = NULL;
    code = memplan_plan("{\"format\": ", NULL, &none, &err);
    printf("bad_graph_code %d\n", (int)code);
    printf("bad_graph_error %s\n", err != NULL ? err : "(none)");
    if (code != MEMPLAN_ERR_BAD_GRAPH || none != NULL || err == NULL) {
        failed = 1;
    }
    memplan_free(none);
    memplan_free(err);

    /* NULL out parameters are refused, not written. */
    code = memplan_plan(graph, NULL, NULL, NULL);
    printf("null_code %d\n", (int)code);
    if (code != MEMPLAN_ERR_NULL_ARGUMENT) {
        failed = 1;
    }

    memplan_free(plan);
    memplan_free(NULL);
    free(graph);
    return failed;
}
