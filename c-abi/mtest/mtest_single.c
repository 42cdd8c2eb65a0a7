/* The main function of MPICH's single-test programs, which define `int run(const char *arg)`
 * instead of `main` (MPICH builds each of them with its own copy of this harness): MPI is
 * initialized around the run, whose argument is the program's first one (the testlist's
 * `arg=`), and its error count decides the " No Errors" line and the exit status. */
#include "mpitest.h"

int run(const char *arg);

int main(int argc, char **argv)
{
    MTest_Init(&argc, &argv);
    int errs = run(argc > 1 ? argv[1] : "");
    MTest_Finalize(errs);
    return MTestReturnValue(errs);
}
