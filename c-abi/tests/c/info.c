/* Info objects (the standard's chapter "The Info Object"): every MPI_Info_ function, its error
 * classes, MPI_INFO_ENV and MPI_Info_create_env, the calls the standard allows before MPI_Init
 * and after MPI_Finalize, and threads that make, change, read and free infos at once
 * (MPI_THREAD_MULTIPLE). Run with 2 processes; prints " No Errors" when every check passes. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <mpi.h>

#define THREADS 4
#define ROUNDS 500

static int rank = -1;
static int errs = 0;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            errs++;                                                           \
            printf("[%d] check failed: %s (line %d)\n", rank, #c, __LINE__); \
        }                                                                     \
    } while (0)

/* The class of error code rc. */
static int class_of(int rc)
{
    int class = -1;
    MPI_Error_class(rc, &class);
    return class;
}

/* Whether value of key in info is want. */
static int has(MPI_Info info, const char *key, const char *want)
{
    char value[MPI_MAX_INFO_VAL];
    int len = sizeof value, flag = 0;
    if (MPI_Info_get_string(info, key, &len, value, &flag) != MPI_SUCCESS)
        return 0;
    return flag && strcmp(value, want) == 0 && len == (int)strlen(want) + 1;
}

/* One thread's rounds: its own infos, made, filled, read, copied, emptied and freed, while
 * the others do the same and read MPI_INFO_ENV. Returns the number of failed checks. */
static void *churn(void *arg)
{
    long t = (long)arg, bad = 0;
    char key[32], val[32], got[MPI_MAX_INFO_VAL], nth[MPI_MAX_INFO_KEY];
    for (int r = 0; r < ROUNDS; r++) {
        MPI_Info info, copy;
        int n, flag, len;
        bad += MPI_Info_create(&info) != MPI_SUCCESS;
        for (int k = 0; k < 8; k++) {
            snprintf(key, sizeof key, "k%d", k);
            snprintf(val, sizeof val, "t%ld-r%d-k%d", t, r, k);
            bad += MPI_Info_set(info, key, val) != MPI_SUCCESS;
        }
        bad += MPI_Info_set(info, "k3", "again") != MPI_SUCCESS;
        bad += MPI_Info_get_nkeys(info, &n) != MPI_SUCCESS || n != 8;
        bad += MPI_Info_get_nthkey(info, 3, nth) != MPI_SUCCESS || strcmp(nth, "k3") != 0;
        len = sizeof got;
        snprintf(val, sizeof val, "t%ld-r%d-k%d", t, r, 5);
        bad += MPI_Info_get_string(info, "k5", &len, got, &flag) != MPI_SUCCESS || !flag ||
               strcmp(got, val) != 0;
        bad += !has(info, "k3", "again");
        bad += MPI_Info_dup(info, &copy) != MPI_SUCCESS;
        bad += MPI_Info_delete(info, "k0") != MPI_SUCCESS;
        bad += MPI_Info_get_nkeys(copy, &n) != MPI_SUCCESS || n != 8;
        bad += MPI_Info_get_nkeys(info, &n) != MPI_SUCCESS || n != 7;
        bad += MPI_Info_free(&copy) != MPI_SUCCESS || copy != MPI_INFO_NULL;
        bad += MPI_Info_free(&info) != MPI_SUCCESS || info != MPI_INFO_NULL;
        bad += MPI_Info_get_nkeys(MPI_INFO_ENV, &n) != MPI_SUCCESS || n < 1;
    }
    return (void *)bad;
}

int main(int argc, char **argv)
{
    MPI_Info info, copy, env;
    char value[MPI_MAX_INFO_VAL], key[MPI_MAX_INFO_KEY];
    char longkey[MPI_MAX_INFO_KEY + 1], longval[MPI_MAX_INFO_VAL + 1];
    int rc, flag, len, n, provided;

    /* Before MPI_Init: the standard allows the info functions, MPI_Info_create_env first. */
    CHECK(MPI_Info_create_env(argc, argv, &env) == MPI_SUCCESS);
    CHECK(has(env, "command", argv[0]));
    CHECK(has(env, "argv", "first second"));
    CHECK(MPI_Info_create(&info) == MPI_SUCCESS);
    CHECK(MPI_Info_set(info, "before", "init") == MPI_SUCCESS);
    CHECK(has(info, "before", "init"));
    rc = MPI_Info_delete(info, "absent");
    CHECK(class_of(rc) == MPI_ERR_INFO_NOKEY);
    CHECK(MPI_Info_free(&info) == MPI_SUCCESS && info == MPI_INFO_NULL);

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    CHECK(provided == MPI_THREAD_MULTIPLE);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* The info made before MPI_Init lives on. */
    CHECK(has(env, "command", argv[0]));
    CHECK(MPI_Info_free(&env) == MPI_SUCCESS && env == MPI_INFO_NULL);

    /* Set, replace in place, trim, read back in insertion order. */
    CHECK(MPI_Info_create(&info) == MPI_SUCCESS);
    CHECK(info != MPI_INFO_NULL && info != MPI_INFO_ENV);
    CHECK(MPI_Info_get_nkeys(info, &n) == MPI_SUCCESS && n == 0);
    CHECK(MPI_Info_set(info, "b", "2") == MPI_SUCCESS);
    CHECK(MPI_Info_set(info, "  a  ", "  one  ") == MPI_SUCCESS);
    CHECK(MPI_Info_set(info, "c", "three") == MPI_SUCCESS);
    CHECK(MPI_Info_set(info, "b", "two") == MPI_SUCCESS);
    CHECK(MPI_Info_set(info, "empty", "") == MPI_SUCCESS);
    CHECK(MPI_Info_get_nkeys(info, &n) == MPI_SUCCESS && n == 4);
    CHECK(MPI_Info_get_nthkey(info, 0, key) == MPI_SUCCESS && strcmp(key, "b") == 0);
    CHECK(MPI_Info_get_nthkey(info, 1, key) == MPI_SUCCESS && strcmp(key, "a") == 0);
    CHECK(MPI_Info_get_nthkey(info, 2, key) == MPI_SUCCESS && strcmp(key, "c") == 0);
    CHECK(MPI_Info_get_nthkey(info, 3, key) == MPI_SUCCESS && strcmp(key, "empty") == 0);
    CHECK(has(info, "b", "two"));
    CHECK(has(info, " a", "one"));
    CHECK(has(info, "empty", ""));

    /* MPI_Info_get_string: truncation, the length query with buflen 0, a missing key. */
    len = 3;
    strcpy(value, "xxxxxx");
    CHECK(MPI_Info_get_string(info, "c", &len, value, &flag) == MPI_SUCCESS);
    CHECK(flag && strcmp(value, "th") == 0 && len == 6);
    len = 0;
    strcpy(value, "keep");
    CHECK(MPI_Info_get_string(info, "c", &len, value, &flag) == MPI_SUCCESS);
    CHECK(flag && len == 6 && strcmp(value, "keep") == 0);
    len = 0;
    CHECK(MPI_Info_get_string(info, "c", &len, NULL, &flag) == MPI_SUCCESS && len == 6);
    len = sizeof value;
    flag = 1;
    CHECK(MPI_Info_get_string(info, "zzz", &len, value, &flag) == MPI_SUCCESS);
    CHECK(!flag && len == (int)sizeof value && strcmp(value, "keep") == 0);

    /* The deprecated MPI_Info_get and MPI_Info_get_valuelen. */
    strcpy(value, "xxxxxx");
    CHECK(MPI_Info_get(info, "c", 2, value, &flag) == MPI_SUCCESS);
    CHECK(flag && strcmp(value, "th") == 0);
    CHECK(MPI_Info_get(info, "c", MPI_MAX_INFO_VAL - 1, value, &flag) == MPI_SUCCESS);
    CHECK(flag && strcmp(value, "three") == 0);
    CHECK(MPI_Info_get(info, "zzz", MPI_MAX_INFO_VAL - 1, value, &flag) == MPI_SUCCESS);
    CHECK(!flag && strcmp(value, "three") == 0);
    CHECK(MPI_Info_get_valuelen(info, "a", &len, &flag) == MPI_SUCCESS && flag && len == 3);
    CHECK(MPI_Info_get_valuelen(info, "zzz", &len, &flag) == MPI_SUCCESS && !flag);

    /* Dup copies pairs and order; the two then change apart. Delete keeps the others' order. */
    CHECK(MPI_Info_dup(info, &copy) == MPI_SUCCESS && copy != info);
    CHECK(MPI_Info_delete(info, "b") == MPI_SUCCESS);
    CHECK(MPI_Info_set(copy, "d", "four") == MPI_SUCCESS);
    CHECK(MPI_Info_get_nkeys(info, &n) == MPI_SUCCESS && n == 3);
    CHECK(MPI_Info_get_nthkey(info, 0, key) == MPI_SUCCESS && strcmp(key, "a") == 0);
    CHECK(MPI_Info_get_nkeys(copy, &n) == MPI_SUCCESS && n == 5);
    CHECK(MPI_Info_get_nthkey(copy, 0, key) == MPI_SUCCESS && strcmp(key, "b") == 0);
    CHECK(MPI_Info_get_nthkey(copy, 4, key) == MPI_SUCCESS && strcmp(key, "d") == 0);
    CHECK(has(copy, "b", "two"));
    CHECK(MPI_Info_free(&copy) == MPI_SUCCESS && copy == MPI_INFO_NULL);

    /* Key and value lengths: MPI_MAX_INFO_KEY - 1 and MPI_MAX_INFO_VAL - 1 fit, one more not. */
    memset(longkey, 'k', sizeof longkey);
    longkey[MPI_MAX_INFO_KEY - 1] = '\0';
    memset(longval, 'v', sizeof longval);
    longval[MPI_MAX_INFO_VAL - 1] = '\0';
    CHECK(MPI_Info_set(info, longkey, longval) == MPI_SUCCESS);
    CHECK(MPI_Info_get_valuelen(info, longkey, &len, &flag) == MPI_SUCCESS && flag &&
          len == MPI_MAX_INFO_VAL - 1);
    CHECK(MPI_Info_get_nthkey(info, 3, key) == MPI_SUCCESS && strcmp(key, longkey) == 0);
    longkey[MPI_MAX_INFO_KEY - 1] = 'k';
    longkey[MPI_MAX_INFO_KEY] = '\0';
    longval[MPI_MAX_INFO_VAL - 1] = 'v';
    longval[MPI_MAX_INFO_VAL] = '\0';
    rc = MPI_Info_set(info, longkey, "x");
    CHECK(class_of(rc) == MPI_ERR_INFO_KEY);
    rc = MPI_Info_set(info, "x", longval);
    CHECK(class_of(rc) == MPI_ERR_INFO_VALUE);
    rc = MPI_Info_get_string(info, longkey, &len, value, &flag);
    CHECK(class_of(rc) == MPI_ERR_INFO_KEY);
    rc = MPI_Info_set(info, "", "x");
    CHECK(class_of(rc) == MPI_ERR_INFO_KEY);
    rc = MPI_Info_set(info, "   ", "x");
    CHECK(class_of(rc) == MPI_ERR_INFO_KEY);
    rc = MPI_Info_delete(info, "");
    CHECK(class_of(rc) == MPI_ERR_INFO_KEY);

    /* A missing key, a key number out of range, a bad length. */
    rc = MPI_Info_delete(info, "b");
    CHECK(class_of(rc) == MPI_ERR_INFO_NOKEY);
    char msg[MPI_MAX_ERROR_STRING];
    MPI_Error_string(rc, msg, &len);
    CHECK(strstr(msg, "MPI_Info_delete") != NULL);
    MPI_Info_get_nkeys(info, &n);
    rc = MPI_Info_get_nthkey(info, n, key);
    CHECK(class_of(rc) == MPI_ERR_ARG);
    rc = MPI_Info_get_nthkey(info, -1, key);
    CHECK(class_of(rc) == MPI_ERR_ARG);
    rc = MPI_Info_get(info, "a", -1, value, &flag);
    CHECK(class_of(rc) == MPI_ERR_ARG);

    /* Handles that are no info: null, freed (also once its slot is reused), never made. */
    MPI_Info stale = info;
    CHECK(MPI_Info_free(&info) == MPI_SUCCESS && info == MPI_INFO_NULL);
    CHECK(MPI_Info_create(&copy) == MPI_SUCCESS);
    CHECK(copy != stale);
    rc = MPI_Info_get_nkeys(stale, &n);
    CHECK(class_of(rc) == MPI_ERR_INFO);
    rc = MPI_Info_set(stale, "a", "b");
    CHECK(class_of(rc) == MPI_ERR_INFO);
    rc = MPI_Info_free(&stale);
    CHECK(class_of(rc) == MPI_ERR_INFO);
    CHECK(MPI_Info_get_nkeys(copy, &n) == MPI_SUCCESS && n == 0);
    CHECK(MPI_Info_free(&copy) == MPI_SUCCESS);
    rc = MPI_Info_get_nkeys(MPI_INFO_NULL, &n);
    CHECK(class_of(rc) == MPI_ERR_INFO);
    rc = MPI_Info_set(MPI_INFO_NULL, "a", "b");
    CHECK(class_of(rc) == MPI_ERR_INFO);
    rc = MPI_Info_dup(MPI_INFO_NULL, &copy);
    CHECK(class_of(rc) == MPI_ERR_INFO);
    info = MPI_INFO_NULL;
    rc = MPI_Info_free(&info);
    CHECK(class_of(rc) == MPI_ERR_INFO);
    rc = MPI_Info_get_nkeys((MPI_Info)0x1234, &n);
    CHECK(class_of(rc) == MPI_ERR_INFO);
    rc = MPI_Info_get_nkeys((MPI_Info)MPI_COMM_WORLD, &n);
    CHECK(class_of(rc) == MPI_ERR_INFO);

    /* MPI_INFO_ENV: readable, copyable, neither changed nor freed. */
    CHECK(MPI_Info_get_nkeys(MPI_INFO_ENV, &n) == MPI_SUCCESS && n >= 3);
    for (int i = 0; i < n; i++)
        CHECK(MPI_Info_get_nthkey(MPI_INFO_ENV, i, key) == MPI_SUCCESS && key[0] != '\0');
    CHECK(has(MPI_INFO_ENV, "command", argv[0]));
    CHECK(has(MPI_INFO_ENV, "argv", "first second"));
    CHECK(has(MPI_INFO_ENV, "maxprocs", "2"));
    len = sizeof value;
    CHECK(MPI_Info_get_string(MPI_INFO_ENV, "arch", &len, value, &flag) == MPI_SUCCESS && flag);
    CHECK(MPI_Info_get_valuelen(MPI_INFO_ENV, "host", &len, &flag) == MPI_SUCCESS && flag);
    CHECK(MPI_Info_dup(MPI_INFO_ENV, &copy) == MPI_SUCCESS);
    CHECK(MPI_Info_set(copy, "command", "changed") == MPI_SUCCESS);
    CHECK(has(copy, "command", "changed") && has(MPI_INFO_ENV, "command", argv[0]));
    CHECK(MPI_Info_free(&copy) == MPI_SUCCESS);
    rc = MPI_Info_set(MPI_INFO_ENV, "a", "b");
    CHECK(class_of(rc) == MPI_ERR_INFO);
    rc = MPI_Info_delete(MPI_INFO_ENV, "command");
    CHECK(class_of(rc) == MPI_ERR_INFO);
    env = MPI_INFO_ENV;
    rc = MPI_Info_free(&env);
    CHECK(class_of(rc) == MPI_ERR_INFO && env == MPI_INFO_ENV);
    /* MPI_Info_create_env with no arguments: the process's own. */
    CHECK(MPI_Info_create_env(0, NULL, &env) == MPI_SUCCESS);
    CHECK(has(env, "command", argv[0]));
    CHECK(MPI_Info_free(&env) == MPI_SUCCESS);
    char *args[] = {"prog", "-n", "3", NULL};
    CHECK(MPI_Info_create_env(3, args, &env) == MPI_SUCCESS);
    CHECK(has(env, "command", "prog") && has(env, "argv", "-n 3"));
    CHECK(MPI_Info_free(&env) == MPI_SUCCESS);

    /* Threads at once. */
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, churn, (void *)t);
    for (int t = 0; t < THREADS; t++) {
        void *bad;
        pthread_join(th[t], &bad);
        CHECK(bad == NULL);
    }

    int total = 0;
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int counted = errs;
    MPI_Finalize();

    /* After MPI_Finalize, still allowed. */
    CHECK(MPI_Info_create(&info) == MPI_SUCCESS);
    CHECK(MPI_Info_set(info, "after", "finalize") == MPI_SUCCESS);
    CHECK(has(info, "after", "finalize"));
    CHECK(MPI_Info_free(&info) == MPI_SUCCESS);
    total += errs - counted;
    if (rank == 0)
        printf(total ? " Found %d errors\n" : " No Errors\n", total);
    return errs ? 1 : 0;
}
