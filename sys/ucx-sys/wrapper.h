/* The UCX headers that src/bindings.rs is generated from (by scripts/regen-ucx-bindings.sh;
 * not read by a normal build): UCP's API and the UCS types it uses. */
#include <ucp/api/ucp.h>
