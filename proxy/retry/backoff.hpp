#pragma once
/** how long to wait before a retry. Pure functions of their inputs: randomness comes in
    as a uniform sample `u` in [0, 1), so tests prove bounds and distributions without clocks
    or sleeps, and the loop draws `u` from its own generator. */
#include <chrono>
#include <vector>

namespace rebound::retry {

using duration = std::chrono::milliseconds;

/** Full jitter (the R-1 default): `uniform(0, min(cap, base * 2^(n-1)))` before retry n
    (n = 1 for the first retry). Doubling stops at the cap, so a large n cannot overflow. */
duration full_jitter(unsigned retry_number, duration base, duration cap, double u);

/** Decorrelated jitter (R-1's allowed alternative): `min(cap, uniform(base, previous * 3))`,
    with `previous` the last wait (the base before the first retry). */
duration decorrelated_jitter(duration previous, duration base, duration cap, double u);

/** A schedule of increasing delays (R-3's webhook table, or one written as `schedule:`) with
    jitter over each step: retry n waits a uniform draw between step n-1 and step n (0 before
    the first); past the table, the last step's range again. The waits grow as the table does
    and a fleet spreads over each whole step: never a fixed interval, never equal jitter. */
duration scheduled_jitter(const std::vector<duration>& steps, unsigned retry_number, double u);

}  // namespace rebound::retry
