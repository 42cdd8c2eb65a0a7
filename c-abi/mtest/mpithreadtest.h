/* mpithreadtest.h: MTest's thread helpers, which MPICH's multithreaded test programs call,
 * written for running them on ch4's library over POSIX threads (mtest_thread.c). */
#ifndef CH4_MPITHREADTEST_H
#define CH4_MPITHREADTEST_H

#include <pthread.h>
#include "mpitest.h"

#if defined(__cplusplus)
extern "C" {
#endif

/* What a thread's function returns, and the value of "nothing". */
#define MTEST_THREAD_RETURN_TYPE void *
#define MTEST_THREAD_RETVAL_IGN NULL
#define MTEST_THREAD_RETURN_EXPRESSION(e) ((void *) (long) (e))
/* A started thread, and a lock the program makes with MTest_thread_lock_create. */
#define MTEST_THREAD_HANDLE pthread_t
#define MTEST_THREAD_LOCK_TYPE pthread_mutex_t
/* A variable several threads read and write without a lock. */
#define MTEST_ATOMIC _Atomic

/* MPI_Init_thread, with what MTest_Init does besides. */
void MTest_Init_thread(int *argc, char ***argv, int required, int *provided);

/* Starts a thread running fn(arg); MTest_Join_threads waits for every one started. Both return
 * 0, or an error when a thread could not be started or joined, or returned nonzero. */
int MTest_Start_thread(MTEST_THREAD_RETURN_TYPE (*fn) (void *), void *arg);
int MTest_Join_threads(void);

/* A mutex of the program's. */
int MTest_thread_lock_create(MTEST_THREAD_LOCK_TYPE *lock);
int MTest_thread_lock(MTEST_THREAD_LOCK_TYPE *lock);
int MTest_thread_unlock(MTEST_THREAD_LOCK_TYPE *lock);
int MTest_thread_lock_free(MTEST_THREAD_LOCK_TYPE *lock);
/* Gives the CPU to another thread. */
int MTest_thread_yield(void);

/* One barrier among `nt` threads of this process: init once, then every thread calls
 * MTest_thread_barrier(nt) (nt the same in each; a new nt makes a new barrier once the old one
 * is idle), then free. */
int MTest_thread_barrier_init(void);
int MTest_thread_barrier(int nt);
int MTest_thread_barrier_free(void);

#if defined(__cplusplus)
}
#endif

#endif
