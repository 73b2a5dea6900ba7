//! What the benchmarks share.

/// (VmRSS, VmHWM) in KiB from a `/proc/*/status` file (`/proc/self/status` or a child's).
pub fn memory_kib(status_path: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(status_path).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
