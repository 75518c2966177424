//! Redis `INFO` replies: the sums the cost meter and the floor read.

/// Sums `field` (`calls`, `usec`) over the `cmdstat_*` lines of an
/// `INFO commandstats` reply, leaving out `cmdstat_info`: the bench's own
/// snapshots (each interval's "before" `INFO` shows in the "after" one).
/// Nothing else is left out: the floor's `PING`s run outside every measured
/// interval and nobody sends `CONFIG`, so a `PING` or `CONFIG` inside one is
/// the measured client's (a library's health check). Commands a Lua script
/// calls have lines of their own and their time is also in the script's
/// `evalsha` line: a sum of `usec` counts it twice.
pub fn commandstats_sum(info: &str, field: &str) -> u64 {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            if name == "info" {
                return None;
            }
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The main thread's CPU time (user + system) in an `INFO cpu` reply, µs;
/// the process's on a server that does not report the main thread's.
pub fn main_thread_cpu_us(info: &str) -> u64 {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':')?.parse::<f64>().ok())
    };
    let main = field("used_cpu_user_main_thread").zip(field("used_cpu_sys_main_thread"));
    let (user, sys) = main
        .or_else(|| field("used_cpu_user").zip(field("used_cpu_sys")))
        .unwrap_or_default();
    ((user + sys) * 1e6).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Commandstats\r\n\
        cmdstat_set:calls=3,usec=10,usec_per_call=3.33,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=9,usec=200,usec_per_call=22.22,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_evalsha:calls=4,usec=40,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn commandstats_sum_skips_info() {
        assert_eq!(commandstats_sum(INFO, "calls"), 9);
        assert_eq!(commandstats_sum(INFO, "usec"), 51);
        assert_eq!(commandstats_sum("", "usec"), 0);
    }

    #[test]
    fn main_thread_cpu_prefers_the_main_thread() {
        let info = "# CPU\r\nused_cpu_sys:2.5\r\nused_cpu_user:3.0\r\n\
                    used_cpu_sys_main_thread:2.000001\r\nused_cpu_user_main_thread:1.5\r\n";
        assert_eq!(main_thread_cpu_us(info), 3_500_001);
        assert_eq!(
            main_thread_cpu_us("used_cpu_sys:0.25\r\nused_cpu_user:0.5\r\n"),
            750_000
        );
        assert_eq!(main_thread_cpu_us(""), 0);
    }
}
