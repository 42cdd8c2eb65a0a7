/* Checks of caching and error handling beyond what MPICH's attr and errhan folders cover: the
 * program's error handlers (called on errors, inherited, MPI_Comm_call_errhandler, calling MPI
 * themselves), error classes and codes with MPI_LASTUSEDCODE, attributes on communicators and
 * datatypes (copy and delete functions, predefined keys, handle reuse), names, the MPI 5.0
 * status accessors, MPI_Status_set_elements and MPI_Aint_add/_diff.
 *
 * Run with "multiple" as its argument, it initializes at MPI_THREAD_MULTIPLE. Prints
 * " No Errors" on rank 0 when every check passed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errs = 0;

#define CHECK(cond, ...)                                      \
    do {                                                      \
        if (!(cond)) {                                        \
            errs++;                                           \
            printf("line %d: %s: ", __LINE__, #cond);         \
            printf(__VA_ARGS__);                              \
            printf("\n");                                     \
            fflush(stdout);                                   \
        }                                                     \
    } while (0)

static int class_of(int code)
{
    int c = -1;
    MPI_Error_class(code, &c);
    return c;
}

/* ---- error handlers */

static int handled = 0;
static MPI_Comm handled_comm = MPI_COMM_NULL;
static int handled_code = MPI_SUCCESS;
static int handler_rank = -1;

static void handler(MPI_Comm *comm, int *code, ...)
{
    handled++;
    handled_comm = *comm;
    handled_code = *code;
    /* A handler may call MPI. */
    MPI_Comm_rank(*comm, &handler_rank);
}

static void check_errhandlers(void)
{
    int rank, size, rc;
    MPI_Comm dup, child, split;
    MPI_Errhandler eh, got;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);

    rc = MPI_Comm_create_errhandler(handler, &eh);
    CHECK(rc == MPI_SUCCESS, "create_errhandler: %d", rc);
    MPI_Comm_set_errhandler(dup, eh);
    MPI_Comm_get_errhandler(dup, &got);
    CHECK(got == eh, "get_errhandler gave another handler");
    MPI_Errhandler_free(&got);

    /* An error on the communicator calls the handler, then returns the code. */
    rc = MPI_Send(&rank, 1, MPI_INT, size, 0, dup);
    CHECK(rc != MPI_SUCCESS, "a send to rank %d succeeded", size);
    CHECK(class_of(rc) == MPI_ERR_RANK, "class %d", class_of(rc));
    CHECK(handled == 1, "handler called %d times", handled);
    CHECK(handled_comm == dup, "handler got another communicator");
    CHECK(handled_code == rc, "handler got code %d, the call returned %d", handled_code, rc);
    CHECK(handler_rank == rank, "MPI_Comm_rank inside the handler gave %d", handler_rank);

    /* New communicators inherit it. */
    MPI_Comm_dup(dup, &child);
    MPI_Comm_split(dup, rank % 2, rank, &split);
    handled = 0;
    rc = MPI_Send(&rank, 1, MPI_INT, size, 0, child);
    CHECK(handled == 1 && handled_comm == child, "dup's handler: %d calls", handled);
    rc = MPI_Send(&rank, 1, MPI_INT, size, 0, split);
    CHECK(handled == 2 && handled_comm == split, "split's handler: %d calls", handled);

    /* MPI_Comm_call_errhandler: the program's handler is called and the call succeeds. */
    handled = 0;
    rc = MPI_Comm_call_errhandler(dup, MPI_ERR_OTHER);
    CHECK(rc == MPI_SUCCESS, "call_errhandler returned %d", rc);
    CHECK(handled == 1 && handled_code == MPI_ERR_OTHER, "%d calls, code %d", handled,
          handled_code);

    /* Under MPI_ERRORS_RETURN nothing is called, and the call succeeds (as in MPICH). */
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    handled = 0;
    rc = MPI_Comm_call_errhandler(dup, MPI_ERR_OTHER);
    CHECK(rc == MPI_SUCCESS, "call_errhandler under MPI_ERRORS_RETURN returned %d", rc);
    rc = MPI_Send(&rank, 1, MPI_INT, size, 0, dup);
    CHECK(rc != MPI_SUCCESS && handled == 0, "rc %d, %d calls", rc, handled);
    MPI_Comm_get_errhandler(dup, &got);
    CHECK(got == MPI_ERRORS_RETURN, "get_errhandler after MPI_ERRORS_RETURN");

    /* A handle that is no error handler. */
    rc = MPI_Comm_set_errhandler(dup, (MPI_Errhandler)(intptr_t)0x7777);
    CHECK(class_of(rc) == MPI_ERR_ERRHANDLER, "bad handler: class %d", class_of(rc));

    MPI_Errhandler_free(&eh);
    CHECK(eh == MPI_ERRHANDLER_NULL, "Errhandler_free left the handle");
    /* The freed handler still serves the communicators that use it. */
    handled = 0;
    MPI_Send(&rank, 1, MPI_INT, size, 0, child);
    CHECK(handled == 1, "a freed handler still in use was not called");
    MPI_Comm_free(&split);
    MPI_Comm_free(&child);
    MPI_Comm_free(&dup);
}

/* ---- error classes, codes, strings */

static int last_used(void)
{
    int *v = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &v, &flag);
    CHECK(flag, "MPI_LASTUSEDCODE not set");
    return flag ? *v : -1;
}

static void check_error_codes(void)
{
    int cls, code, other, rc, len;
    char s[MPI_MAX_ERROR_STRING];
    int before = last_used();
    CHECK(before >= MPI_ERR_LASTCODE, "MPI_LASTUSEDCODE %d", before);

    MPI_Add_error_class(&cls);
    CHECK(cls > MPI_ERR_LASTCODE, "class %d", cls);
    CHECK(last_used() == cls, "MPI_LASTUSEDCODE %d, class %d", last_used(), cls);
    MPI_Add_error_code(cls, &code);
    CHECK(last_used() == code, "MPI_LASTUSEDCODE %d, code %d", last_used(), code);
    CHECK(class_of(code) == cls && class_of(cls) == cls, "classes %d %d", class_of(code),
          class_of(cls));
    MPI_Error_string(code, s, &len);
    CHECK(len == 0, "a code without a string: \"%s\"", s);
    MPI_Add_error_string(code, "my own error");
    MPI_Error_string(code, s, &len);
    CHECK(strcmp(s, "my own error") == 0 && len == 12, "string \"%s\" (%d)", s, len);
    MPI_Add_error_string(cls, "my own class");
    MPI_Error_string(cls, s, &len);
    CHECK(strcmp(s, "my own class") == 0, "class string \"%s\"", s);

    /* Codes of a predefined class. */
    MPI_Add_error_code(MPI_ERR_OTHER, &other);
    CHECK(class_of(other) == MPI_ERR_OTHER, "class %d", class_of(other));

    /* What the standard calls erroneous is refused (MPI_ERRORS_RETURN on world). */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Add_error_string(MPI_ERR_OTHER, "no");
    CHECK(class_of(rc) == MPI_ERR_ARG, "a predefined class's string: class %d", class_of(rc));
    rc = MPI_Add_error_code(cls + 1000, &code);
    CHECK(class_of(rc) == MPI_ERR_ARG, "a code of no class: class %d", class_of(rc));
    rc = MPI_Remove_error_class(cls);
    CHECK(rc != MPI_SUCCESS, "a class with a code removed");
    rc = MPI_Remove_error_code(code);
    CHECK(rc != MPI_SUCCESS, "a code with a string removed");
    rc = MPI_Remove_error_string(MPI_ERR_OTHER);
    CHECK(rc != MPI_SUCCESS, "a predefined class's string removed");

    CHECK(MPI_Remove_error_string(code) == MPI_SUCCESS, "remove string");
    CHECK(MPI_Remove_error_code(code) == MPI_SUCCESS, "remove code");
    CHECK(MPI_Remove_error_code(other) == MPI_SUCCESS, "remove other");
    CHECK(MPI_Remove_error_string(cls) == MPI_SUCCESS, "remove class string");
    CHECK(MPI_Remove_error_class(cls) == MPI_SUCCESS, "remove class");
    CHECK(last_used() == before, "MPI_LASTUSEDCODE %d after removal, %d before", last_used(),
          before);
    rc = MPI_Error_class(code, &len);
    CHECK(rc != MPI_SUCCESS, "a removed code still has a class");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* ---- attributes */

static int copies = 0, deletes = 0;

static int copy_fn(MPI_Comm comm, int keyval, void *extra, void *in, void *out, int *flag)
{
    int rank;
    copies++;
    MPI_Comm_rank(comm, &rank); /* callbacks may call MPI */
    *(MPI_Aint *)out = (MPI_Aint)in + *(int *)extra;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm comm, int keyval, void *value, void *extra)
{
    deletes++;
    return MPI_SUCCESS;
}

static int type_copy(MPI_Datatype t, int keyval, void *extra, void *in, void *out, int *flag)
{
    copies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int type_delete(MPI_Datatype t, int keyval, void *value, void *extra)
{
    deletes++;
    return MPI_SUCCESS;
}

static MPI_Aint get(MPI_Comm comm, int key, int *flag)
{
    void *v = NULL;
    MPI_Comm_get_attr(comm, key, &v, flag);
    return (MPI_Aint)v;
}

static void check_comm_attributes(void)
{
    int kprog, kdup, knull, ktype, flag, rc, size, add = 5;
    MPI_Comm a, b, c;
    MPI_Info info;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_create_keyval(copy_fn, delete_fn, &kprog, &add);
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &kdup, NULL);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &knull, NULL);
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, &ktype, NULL);

    get(a, kprog, &flag);
    CHECK(!flag, "an attribute never set");
    MPI_Comm_set_attr(a, kprog, (void *)10);
    MPI_Comm_set_attr(a, kdup, (void *)20);
    MPI_Comm_set_attr(a, knull, (void *)30);
    CHECK(get(a, kdup, &flag) == 20 && flag, "kdup");

    /* Overwriting deletes the old value. */
    deletes = 0;
    MPI_Comm_set_attr(a, knull, (void *)31);
    CHECK(deletes == 1 && get(a, knull, &flag) == 31, "%d deletes", deletes);

    /* Duplication: the program's function, MPI_COMM_DUP_FN, MPI_COMM_NULL_COPY_FN. */
    copies = 0;
    MPI_Comm_dup(a, &b);
    CHECK(copies == 1, "%d copies", copies);
    CHECK(get(b, kprog, &flag) == 15 && flag, "kprog on the copy");
    CHECK(get(b, kdup, &flag) == 20 && flag, "kdup on the copy");
    get(b, knull, &flag);
    CHECK(!flag, "knull copied");
    MPI_Info_create(&info);
    MPI_Comm_dup_with_info(b, info, &c);
    MPI_Info_free(&info);
    CHECK(get(c, kprog, &flag) == 20 && flag, "kprog on MPI_Comm_dup_with_info's copy");

    /* Delete and free call the delete functions. */
    deletes = 0;
    MPI_Comm_delete_attr(b, kprog);
    CHECK(deletes == 1, "%d deletes", deletes);
    get(b, kprog, &flag);
    CHECK(!flag, "deleted attribute still there");
    MPI_Comm_delete_attr(b, kprog); /* none there: nothing to do */
    CHECK(deletes == 1, "%d deletes", deletes);
    deletes = 0;
    MPI_Comm_free(&a); /* kprog, knull */
    CHECK(deletes == 2, "%d deletes on free", deletes);

    /* A freed communicator's handle, reused, has no attributes. */
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    get(a, kdup, &flag);
    CHECK(!flag, "a new communicator has an attribute");

    /* What is refused. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_TAG_UB, NULL);
    CHECK(class_of(rc) == MPI_ERR_KEYVAL, "set MPI_TAG_UB: class %d", class_of(rc));
    rc = MPI_Comm_set_attr(MPI_COMM_WORLD, ktype, NULL);
    CHECK(class_of(rc) == MPI_ERR_KEYVAL, "a datatype key on a communicator: class %d",
          class_of(rc));
    rc = MPI_Comm_set_attr(MPI_COMM_WORLD, 123456789, NULL);
    CHECK(class_of(rc) == MPI_ERR_KEYVAL, "a key never made: class %d", class_of(rc));
    rc = MPI_Comm_set_attr(MPI_COMM_NULL, kdup, NULL);
    CHECK(class_of(rc) == MPI_ERR_COMM, "MPI_COMM_NULL: class %d", class_of(rc));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    /* The predefined attributes. */
    {
        int *v;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag);
        CHECK(flag && *v >= 32767, "MPI_TAG_UB");
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_HOST, &v, &flag);
        CHECK(flag && *v == MPI_PROC_NULL, "MPI_HOST");
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_IO, &v, &flag);
        CHECK(flag && *v == MPI_ANY_SOURCE, "MPI_IO");
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &v, &flag);
        CHECK(flag && *v == size, "MPI_UNIVERSE_SIZE");
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &v, &flag);
        CHECK(flag && *v == 0, "MPI_WTIME_IS_GLOBAL");
    }

    /* A freed key lives on with its attributes, and its delete function still runs. */
    MPI_Comm_free_keyval(&knull);
    CHECK(knull == MPI_KEYVAL_INVALID, "free_keyval left the key");
    deletes = 0;
    MPI_Comm_free(&c); /* kprog, kdup */
    MPI_Comm_free(&b); /* kdup */
    MPI_Comm_free(&a);
    CHECK(deletes == 1, "%d deletes", deletes);
    MPI_Comm_free_keyval(&kprog);
    MPI_Comm_free_keyval(&kdup);
    MPI_Type_free_keyval(&ktype);
}

static void check_type_attributes(void)
{
    int key, flag;
    void *v;
    MPI_Datatype t, u;
    MPI_Type_create_keyval(type_copy, type_delete, &key, NULL);
    /* On a predefined datatype. */
    MPI_Type_set_attr(MPI_INT, key, (void *)7);
    MPI_Type_get_attr(MPI_INT, key, &v, &flag);
    CHECK(flag && v == (void *)7, "MPI_INT's attribute");
    deletes = 0;
    MPI_Type_delete_attr(MPI_INT, key);
    CHECK(deletes == 1, "%d deletes", deletes);
    MPI_Type_get_attr(MPI_INT, key, &v, &flag);
    CHECK(!flag, "MPI_INT's attribute deleted");

    MPI_Type_contiguous(3, MPI_INT, &t);
    MPI_Type_set_attr(t, key, (void *)8);
    copies = 0;
    MPI_Type_dup(t, &u);
    CHECK(copies == 1, "%d copies", copies);
    MPI_Type_get_attr(u, key, &v, &flag);
    CHECK(flag && v == (void *)8, "the duplicate's attribute");
    deletes = 0;
    MPI_Type_free(&t);
    MPI_Type_free(&u);
    CHECK(deletes == 2, "%d deletes", deletes);
    MPI_Type_free_keyval(&key);
}

/* ---- names */

static void check_names(void)
{
    char name[MPI_MAX_OBJECT_NAME], longname[300];
    int len;
    MPI_Comm a, b;
    MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14, "world: %s", name);
    MPI_Comm_get_name(MPI_COMM_SELF, name, &len);
    CHECK(strcmp(name, "MPI_COMM_SELF") == 0, "self: %s", name);
    MPI_Comm_get_name(MPI_COMM_NULL, name, &len);
    CHECK(strcmp(name, "MPI_COMM_NULL") == 0, "null: %s", name);
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_get_name(a, name, &len);
    CHECK(len == 0 && name[0] == 0, "a new communicator's name: %s", name);
    MPI_Comm_set_name(a, "mine");
    MPI_Comm_get_name(a, name, &len);
    CHECK(strcmp(name, "mine") == 0, "set name: %s", name);
    MPI_Comm_dup(a, &b);
    MPI_Comm_get_name(b, name, &len);
    CHECK(len == 0, "a duplicate took the name %s", name);
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    MPI_Comm_set_name(b, longname);
    MPI_Comm_get_name(b, name, &len);
    CHECK(len == MPI_MAX_OBJECT_NAME - 1 && (int)strlen(name) == len, "long name: %d", len);
    MPI_Comm_set_name(MPI_COMM_WORLD, "world");
    MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
    CHECK(strcmp(name, "world") == 0, "renamed world: %s", name);
    MPI_Comm_set_name(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    MPI_Comm_free(&b);
    MPI_Comm_free(&a);
}

/* ---- statuses and addresses */

static void check_status(void)
{
    MPI_Status st;
    int v, count;
    MPI_Count c;
    memset(&st, 0, sizeof st);
    MPI_Status_set_source(&st, 3);
    MPI_Status_set_tag(&st, 44);
    MPI_Status_set_error(&st, MPI_ERR_TRUNCATE);
    CHECK(st.MPI_SOURCE == 3 && st.MPI_TAG == 44 && st.MPI_ERROR == MPI_ERR_TRUNCATE,
          "fields %d %d %d", st.MPI_SOURCE, st.MPI_TAG, st.MPI_ERROR);
    MPI_Status_get_source(&st, &v);
    CHECK(v == 3, "source %d", v);
    MPI_Status_get_tag(&st, &v);
    CHECK(v == 44, "tag %d", v);
    MPI_Status_get_error(&st, &v);
    CHECK(v == MPI_ERR_TRUNCATE, "error %d", v);
    MPI_Status_set_elements(&st, MPI_INT, 5);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 5, "count %d", count);
    MPI_Get_elements(&st, MPI_DOUBLE, &count);
    CHECK(count == MPI_UNDEFINED, "5 ints as doubles: %d", count);
    MPI_Status_set_elements_c(&st, MPI_DOUBLE, (MPI_Count)1 << 33);
    MPI_Get_count_c(&st, MPI_DOUBLE, &c);
    CHECK(c == (MPI_Count)1 << 33, "count %lld", (long long)c);

    {
        char buf[64];
        MPI_Aint a0, a1;
        MPI_Get_address(&buf[0], &a0);
        MPI_Get_address(&buf[40], &a1);
        CHECK(MPI_Aint_diff(a1, a0) == 40, "diff %ld", (long)MPI_Aint_diff(a1, a0));
        CHECK(MPI_Aint_add(a0, 40) == a1, "add");
        CHECK(MPI_Aint_add(a1, -40) == a0, "add a negative displacement");
    }
}

int main(int argc, char **argv)
{
    int provided, rank, total = 0;
    int level = argc > 1 && strcmp(argv[1], "multiple") == 0 ? MPI_THREAD_MULTIPLE
                                                              : MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, level, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_errhandlers();
    check_error_codes();
    check_comm_attributes();
    check_type_attributes();
    check_names();
    check_status();
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total)
            printf(" Found %d errors\n", total);
        else
            printf(" No Errors\n");
    }
    MPI_Finalize();
    return total != 0;
}
