//! coldstart's system room, below every other: what the tool asks of the
//! operating system. Starting the measured program as the right user and
//! watching its process tree (`launch`), forking the prefetch launcher's
//! detached prefetcher and watching for the program's exit (`process`), controlling and measuring the page
//! cache (`cache`), evicting or checking a set of files with per-file results
//! (`eviction`) and finding the files a path names (`walk`), overriding
//! device readahead for a run (`readahead`), reading build-ids without disturbing the cache (`build_id`), telling
//! a recorded file from a later one at the same path (`identity`), and every
//! /proc parser (`proc`), the BPF calls of the recorder's programs (`bpf`), the kernel's own type
//! descriptions their structure offsets come from (`btf`),
//! and the fanotify group and inode handles that name traced files (`fanotify`).
//! Opening paths a plan names, possibly a hostile one, with nothing opened
//! before its inode is examined (`path_handle`), as the user a plan is
//! replayed for, on one thread (`credentials`). It knows nothing of profiles or traces, so the
//! prefetch launcher can use it without linking the tracer or SQLite.
//!
//! Linux only.

pub mod bpf;
pub mod btf;
pub mod build_id;
pub mod cache;
mod cgroup;
pub mod credentials;
pub mod eviction;
pub mod exec_args;
pub mod fanotify;
pub mod filesystem;
pub mod identity;
pub mod image;
pub mod launch;
pub mod path_handle;
pub mod proc;
pub mod process;
pub mod readahead;
pub mod walk;
