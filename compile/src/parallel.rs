//! Parallel compiles: a list of kernels compiled by as many clang processes at a time as
//! the machine has cores (each compile takes a warm server of the process's pool where
//! there is one, see [`crate::route`]; workers beyond the pool's size wait for a server).
//!
//! Each kernel gets its own clang run (and its own result): one broken kernel fails alone.
//! Results come back in input order. Workers take the next job from a shared counter, so
//! a slow kernel does not hold up a fixed share of the list.

use crate::cache::{Cache, CacheStatus};
use crate::clang::{CompileOptions, Compiler};
use crate::error::Result;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One kernel to compile.
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    /// C source or LLVM IR text.
    pub source: &'a [u8],
    /// How to compile it.
    pub opts: &'a CompileOptions,
}

/// How to run a list of compiles.
#[derive(Clone, Copy, Debug, Default)]
pub struct ParallelOptions<'a> {
    /// Concurrent clang processes; `None` is [`std::thread::available_parallelism`] (1 if
    /// unknown). Never more than the number of jobs.
    pub workers: Option<NonZeroUsize>,
    /// Serve (and fill) from this cache; then each result says hit or miss.
    pub cache: Option<&'a Cache>,
}

/// The worker count `options` asks for, for `jobs` jobs.
pub fn worker_count(options: &ParallelOptions<'_>, jobs: usize) -> usize {
    let want = options
        .workers
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    want.min(jobs).max(1)
}

/// Compiles every job, several at a time: element `i` of the result is job `i`'s object
/// or its error. With a cache, each object comes with whether it was a hit; without
/// one, every compile is a [`CacheStatus::Miss`].
pub fn compile_all(
    compiler: &Compiler,
    jobs: &[Job<'_>],
    options: &ParallelOptions<'_>,
) -> Vec<Result<(Vec<u8>, CacheStatus)>> {
    map_parallel(
        jobs,
        worker_count(options, jobs.len()),
        |job| match options.cache {
            Some(cache) => cache.compile(compiler, job.source, job.opts),
            None => compiler
                .compile(job.source, job.opts)
                .map(|o| (o, CacheStatus::Miss)),
        },
    )
}

/// Compiles `sources`, all with the same options, several at a time; element `i` is
/// source `i`'s object or error.
pub fn compile_sources<S: AsRef<[u8]> + Sync>(
    compiler: &Compiler,
    sources: &[S],
    opts: &CompileOptions,
    workers: Option<NonZeroUsize>,
) -> Vec<Result<Vec<u8>>> {
    let options = ParallelOptions {
        workers,
        cache: None,
    };
    map_parallel(sources, worker_count(&options, sources.len()), |s| {
        compiler.compile(s.as_ref(), opts)
    })
}

/// `f` over `items` on `workers` threads (this one and `workers - 1` scoped helpers);
/// results in input order. A helper the system refuses to start is simply not there: the
/// others, this thread included, take its share (no panic, no error).
fn map_parallel<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if workers <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, R)>> = Mutex::new(Vec::with_capacity(items.len()));
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(item) = items.get(i) else { break };
        let r = f(item);
        done.lock().unwrap_or_else(|p| p.into_inner()).push((i, r));
    };
    std::thread::scope(|scope| {
        for _ in 1..workers {
            if std::thread::Builder::new()
                .spawn_scoped(scope, work)
                .is_err()
            {
                break;
            }
        }
        work();
    });
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_kept_whatever_the_worker_count() {
        let items: Vec<u64> = (0..100).collect();
        for workers in [1, 2, 3, 8, 200] {
            let out = map_parallel(&items, workers, |&x| {
                // Uneven work, so workers finish out of order.
                std::thread::sleep(std::time::Duration::from_micros((x * 37) % 200));
                x * x
            });
            assert_eq!(out, items.iter().map(|x| x * x).collect::<Vec<_>>());
        }
        assert!(map_parallel(&[] as &[u64], 4, |&x| x).is_empty());
    }

    #[test]
    fn worker_counts() {
        let two = ParallelOptions {
            workers: NonZeroUsize::new(2),
            cache: None,
        };
        assert_eq!(worker_count(&two, 10), 2);
        assert_eq!(worker_count(&two, 1), 1);
        assert_eq!(worker_count(&two, 0), 1);
        assert!(worker_count(&ParallelOptions::default(), 64) >= 1);
    }
}
