/* mtest_thread.c: MTest's thread helpers (mpithreadtest.h) over POSIX threads. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include "mpithreadtest.h"

#define MAX_THREADS 256

static pthread_t started[MAX_THREADS];
static int nstarted = 0;
static pthread_mutex_t started_lock = PTHREAD_MUTEX_INITIALIZER;

int MTest_Start_thread(MTEST_THREAD_RETURN_TYPE (*fn) (void *), void *arg)
{
    pthread_mutex_lock(&started_lock);
    if (nstarted >= MAX_THREADS) {
        pthread_mutex_unlock(&started_lock);
        fprintf(stderr, "MTest_Start_thread: more than %d threads\n", MAX_THREADS);
        return 1;
    }
    int err = pthread_create(&started[nstarted], NULL, fn, arg);
    if (err == 0)
        nstarted++;
    pthread_mutex_unlock(&started_lock);
    return err;
}

int MTest_Join_threads(void)
{
    int errs = 0;
    pthread_mutex_lock(&started_lock);
    for (int i = 0; i < nstarted; i++) {
        void *ret = NULL;
        if (pthread_join(started[i], &ret) != 0)
            errs++;
    }
    nstarted = 0;
    pthread_mutex_unlock(&started_lock);
    return errs;
}

int MTest_thread_lock_create(MTEST_THREAD_LOCK_TYPE *lock)
{
    return pthread_mutex_init(lock, NULL);
}

int MTest_thread_lock(MTEST_THREAD_LOCK_TYPE *lock)
{
    return pthread_mutex_lock(lock);
}

int MTest_thread_unlock(MTEST_THREAD_LOCK_TYPE *lock)
{
    return pthread_mutex_unlock(lock);
}

int MTest_thread_lock_free(MTEST_THREAD_LOCK_TYPE *lock)
{
    return pthread_mutex_destroy(lock);
}

int MTest_thread_yield(void)
{
    return sched_yield();
}

/* A reusable counting barrier: a generation number lets the last arrival release the others
 * without a second phase. */
static pthread_mutex_t barrier_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t barrier_cond = PTHREAD_COND_INITIALIZER;
static int barrier_waiting = 0;
static unsigned long barrier_generation = 0;

int MTest_thread_barrier_init(void)
{
    pthread_mutex_lock(&barrier_lock);
    barrier_waiting = 0;
    pthread_mutex_unlock(&barrier_lock);
    return 0;
}

int MTest_thread_barrier(int nt)
{
    if (nt <= 1)
        return 0;
    pthread_mutex_lock(&barrier_lock);
    unsigned long gen = barrier_generation;
    if (++barrier_waiting == nt) {
        barrier_waiting = 0;
        barrier_generation++;
        pthread_cond_broadcast(&barrier_cond);
    } else {
        while (gen == barrier_generation)
            pthread_cond_wait(&barrier_cond, &barrier_lock);
    }
    pthread_mutex_unlock(&barrier_lock);
    return 0;
}

int MTest_thread_barrier_free(void)
{
    return 0;
}
