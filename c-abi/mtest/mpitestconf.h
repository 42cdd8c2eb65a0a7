/* mpitestconf.h for MPICH's test programs built on ch4's library: the configuration facts
 * MPICH's configure step would record. Nothing here changes what the programs test. */
#ifndef CH4_MPITESTCONF_H
#define CH4_MPITESTCONF_H
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_UNISTD_H 1
#define HAVE_MEMORY_H 1
#endif
