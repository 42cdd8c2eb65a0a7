/* The PMIx header that src/bindings.rs is generated from (by scripts/regen-pmix-bindings.sh;
 * not read by a normal build): the client API of OpenPMIx. */
#include <pmix.h>
