//! What the harness-less benchmarks read about the processes they run: CPU time (their
//! own, their children's, redis-server's from `INFO cpu`), resident memory, cores to pin
//! to, and `redis-benchmark`'s answer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// `redis-benchmark` on the `PATH` (or in `/usr/bin`, `/usr/local/bin`).
pub fn redis_benchmark_binary() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain(["/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join("redis-benchmark"))
        .find(|path| path.is_file())
}

/// What to say when `redis-benchmark` is missing.
pub const REDIS_BENCHMARK_HINT: &str = "\
redis-benchmark was not found: this benchmark compares the store with it.
  Install it: `apt-get install redis-tools` (Debian/Ubuntu; `redis-server` pulls it in),
  `brew install redis` (macOS).";

/// The last figure before "requests per second" in `redis-benchmark -q`'s output. `-q`
/// rewrites a progress line with `\r` while it runs, so the final figure is the last one.
pub fn requests_per_second(output: &str) -> Option<f64> {
    let (before, _) = output.rsplit_once("requests per second")?;
    before.split_whitespace().next_back()?.parse().ok()
}

/// One command's line of `INFO commandstats`: how often it ran, and its microseconds in
/// all.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CommandStat {
    /// Calls so far.
    pub calls: u64,
    /// Microseconds spent in them so far.
    pub usec: u64,
}

/// Each command's calls and microseconds, from the text of `INFO commandstats`.
pub fn command_stats_in_info(info: &str) -> BTreeMap<String, CommandStat> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |wanted: &str| {
                fields
                    .split(',')
                    .find_map(|field| field.strip_prefix(wanted)?.strip_prefix('='))
                    .and_then(|value| value.parse().ok())
            };
            let stat = CommandStat {
                calls: field("calls")?,
                usec: field("usec")?,
            };
            Some((name.to_owned(), stat))
        })
        .collect()
}

/// redis-server's CPU time, user and system, from the text of `INFO cpu`.
pub fn cpu_in_info(info: &str) -> Duration {
    let seconds: f64 = info
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| matches!(*name, "used_cpu_sys" | "used_cpu_user"))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum();
    Duration::from_secs_f64(seconds)
}

/// A number field (`name:value`) of an `INFO` text; `None` when it is missing.
pub fn info_field(info: &str, name: &str) -> Option<f64> {
    info.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(field, _)| *field == name)
        .and_then(|(_, value)| value.trim().parse().ok())
}

/// CPU time (user + system) of this process and of its waited-for children, from
/// `/proc/self/stat`; zero where there is no such file.
pub fn process_cpu() -> (Duration, Duration) {
    // Linux counts these in USER_HZ ticks, 100 a second on every architecture it runs on;
    // over rounds of seconds a 10 ms tick is precise enough.
    const TICK: Duration = Duration::from_millis(10);
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (Duration::ZERO, Duration::ZERO);
    };
    // The command name, in parentheses, may hold spaces; fields 14 to 17 (utime, stime,
    // cutime, cstime) come 11 after the parenthesis.
    let ticks: Vec<u32> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|field| field.parse().ok())
        .collect();
    match ticks[..] {
        [utime, stime, cutime, cstime] => (TICK * (utime + stime), TICK * (cutime + cstime)),
        _ => (Duration::ZERO, Duration::ZERO),
    }
}

/// This process' resident memory (`VmRSS`), in bytes; zero where it cannot be read.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Pins every thread of process `pid` to CPU `cpu` (`taskset -a -p -c`); threads it starts
/// later inherit the pinning. `false` when the machine has no such CPU, or `taskset` is
/// missing or fails: then nothing is pinned.
pub fn pin(pid: u32, cpu: usize) -> bool {
    Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .output()
        .is_ok_and(|output| output.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_stats_read_calls_and_microseconds_of_each_command() {
        let info = "# Commandstats\r\n\
            cmdstat_set:calls=3,usec=12,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_evalsha:calls=2,usec=9,usec_per_call=4.50,rejected_calls=0,failed_calls=0\r\n";
        let stats = command_stats_in_info(info);
        assert_eq!(stats["set"], CommandStat { calls: 3, usec: 12 });
        assert_eq!(stats["evalsha"], CommandStat { calls: 2, usec: 9 });
        assert_eq!(stats.len(), 2, "usec_per_call is not usec: {stats:?}");
    }
}
