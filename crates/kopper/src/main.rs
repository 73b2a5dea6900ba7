use std::io::Write as _;
use std::process::ExitCode;

use kopper::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    return_large_buffers_to_the_system();
    give_back_free_memory_after_bursts();
    let command = Cli::parse_or_exit().into_command();
    match kopper::execute(command).await {
        Ok(code) => code,
        Err(error) => {
            // Not `eprintln!`: with stderr closed it would panic instead of exiting.
            let _ = writeln!(std::io::stderr(), "kopper: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Lets every buffer of 128 KiB or more (a large ConfigMap or Secret read, written or
/// listed) be mapped on its own and unmapped when freed. glibc otherwise raises this
/// threshold each time such a buffer is freed, and carves the next ones from its heap, where
/// the memory stays resident after the work is done: a tenant's churn of large ConfigMaps
/// left kopper 50% above its idle memory, and 300 copies of a 900 KiB ConfigMap left it at
/// 110 MiB instead of 26 MiB (`cargo bench -p kopper --bench resources`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn return_large_buffers_to_the_system() {
    const LARGE: libc::c_int = 128 * 1024;
    // SAFETY: mallopt only sets a parameter of the allocator, under the allocator's own lock;
    // nothing is freed or moved. A refusal (it returns 0) leaves glibc's default, which works.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE);
    }
}

/// Other allocators return large buffers to the system by themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn return_large_buffers_to_the_system() {}

/// How often kopper looks for free memory that glibc keeps.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Free memory in glibc's heaps worth giving back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_ABOVE: usize = 16 * 1024 * 1024;

/// Gives the system back, every [`TRIM_INTERVAL`], the free memory glibc keeps in its heaps
/// once it exceeds [`TRIM_ABOVE`]. glibc returns freed memory by itself only from the top
/// of a heap, so after a burst of work (75,000 pods labelled: their patches, answers and
/// Events) the heap stays at its peak with a few live objects above the free space: at
/// 3,000 namespaces and 45,000 pods, 129 of 139 MiB were free and resident, and trimming
/// gave back 99.5 MiB (`cargo bench -p kopper --bench scale`, heap read with gdb). An idle
/// kopper has little free memory and makes no call.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn give_back_free_memory_after_bursts() {
    tokio::spawn(async {
        let mut ticks = tokio::time::interval(TRIM_INTERVAL);
        loop {
            ticks.tick().await;
            trim_free_memory_above(TRIM_ABOVE);
        }
    });
}

/// Other allocators return free memory to the system by themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back_free_memory_after_bursts() {}

/// Returns the free pages of glibc's heaps to the system when more than `above` bytes are
/// free in them; whether it did.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_free_memory_above(above: usize) -> bool {
    // SAFETY: mallinfo2 reads the allocator's statistics, each arena under its own lock.
    let free = unsafe { libc::mallinfo2() }.fordblks;
    if free <= above {
        return false;
    }
    // SAFETY: malloc_trim releases the pages of free chunks (madvise) under each arena's lock;
    // no live allocation is moved or freed.
    unsafe {
        libc::malloc_trim(0);
    }
    true
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Resident memory of this process, from /proc/self/statm (pages of 4 KiB).
    fn resident_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    /// After a burst of small allocations freed below one still live, the free memory stays
    /// resident until it is trimmed; a trim gives most of it back, and nothing is trimmed
    /// while little is free.
    #[test]
    fn free_memory_left_by_a_burst_is_given_back() {
        const BURST: usize = 64 * 1024 * 1024;
        let burst: Vec<Vec<u8>> = (0..BURST / 1024).map(|index| vec![index as u8; 1024]).collect();
        let above = vec![1u8; 1024];
        drop(burst);
        let before = resident_bytes();
        assert!(!trim_free_memory_above(usize::MAX), "nothing is trimmed below the threshold");
        assert!(trim_free_memory_above(BURST / 4), "tens of MiB are free");
        let after = resident_bytes();
        assert!(before - after.min(before) > BURST / 2, "resident {before} B before, {after} B after");
        drop(above);
    }
}
