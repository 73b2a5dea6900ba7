//! The standard `process_*` metrics every Prometheus client exports on Linux (CPU, memory,
//! file descriptors, start time), read from /proc at each scrape. prometheus-client has no
//! process collector, and the crates that do pull in a second metrics library.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux reports CPU time and start time in clock ticks of 1/100 s on every architecture
/// kopper is built for (`USER_HZ`).
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What /proc says of this process; fields it could not read are `None` and not exported.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessFigures {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<f64>,
    pub virtual_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub start_time_seconds: Option<f64>,
}

impl ProcessFigures {
    pub fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let fields = stat.as_deref().map(stat_fields).unwrap_or_default();
        let field = |n: usize| fields.get(n).and_then(|value| value.parse::<f64>().ok());
        let boot_time = std::fs::read_to_string("/proc/stat").ok().as_deref().and_then(boot_time);
        let status = std::fs::read_to_string("/proc/self/status").ok();
        let kib = |key: &str| status.as_deref().and_then(|s| status_kib(s, key)).map(|kib| kib * 1024.0);
        Self {
            // utime and stime: fields 14 and 15 of stat(5), counted from 1.
            cpu_seconds: field(13).zip(field(14)).map(|(user, system)| (user + system) / TICKS_PER_SECOND),
            resident_bytes: kib("VmRSS:"),
            virtual_bytes: kib("VmSize:"),
            open_fds: std::fs::read_dir("/proc/self/fd").ok().map(|dir| dir.count() as f64),
            max_fds: std::fs::read_to_string("/proc/self/limits").ok().as_deref().and_then(max_open_files),
            start_time_seconds: boot_time.zip(field(21)).map(|(boot, ticks)| boot + ticks / TICKS_PER_SECOND),
        }
    }
}

/// The fields of /proc/self/stat from the state on (field 3), numbered from 0 as field 1
/// would be; the command name in parentheses may hold spaces, so it is cut out first.
fn stat_fields(stat: &str) -> Vec<String> {
    let after_name = stat.rfind(')').map_or(stat, |end| &stat[end + 1..]);
    let mut fields = vec![String::new(), String::new()];
    fields.extend(after_name.split_whitespace().map(str::to_owned));
    fields
}

fn boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat.lines().find_map(|line| line.strip_prefix("btime "))?.trim().parse().ok()
}

fn status_kib(status: &str, key: &str) -> Option<f64> {
    status.lines().find_map(|line| line.strip_prefix(key))?.split_whitespace().next()?.parse().ok()
}

fn max_open_files(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|line| line.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let figures = ProcessFigures::read();
        if let Some(cpu) = figures.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        let gauges = [
            ("process_resident_memory_bytes", "Resident memory size in bytes", figures.resident_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes", figures.virtual_bytes),
            ("process_open_fds", "Number of open file descriptors", figures.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", figures.max_fds),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                figures.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value);
                let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
                gauge.encode(metric)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_a_command_name_with_spaces() {
        let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1234 0 0";
        let fields = stat_fields(stat);
        assert_eq!(fields[2], "S");
        assert_eq!(fields[13], "250");
        assert_eq!(fields[14], "50");
        assert_eq!(fields[21], "1234");
    }

    #[test]
    fn this_process_has_memory_cpu_fds_and_a_start_time() {
        let figures = ProcessFigures::read();
        assert!(figures.resident_bytes.is_some_and(|bytes| bytes > 1024.0 * 1024.0));
        assert!(figures.open_fds.is_some_and(|fds| fds >= 3.0));
        assert!(figures.max_fds.is_some_and(|max| max >= figures.open_fds.unwrap()));
        assert!(figures.cpu_seconds.is_some());
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(figures.start_time_seconds.is_some_and(|start| start <= now + 1.0 && start > now - 86_400.0));
    }

    #[test]
    fn limits_give_the_soft_open_files_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 4096                 files\n";
        assert_eq!(max_open_files(limits), Some(1024.0));
    }
}
