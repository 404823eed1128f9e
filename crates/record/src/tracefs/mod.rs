//! tracefs: event formats, the binary ring buffer and the decoded events.

pub mod clock;
pub mod events;
pub mod format;
pub mod instance;
pub mod ringbuf;
pub mod uprobes;
