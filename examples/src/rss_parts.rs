//! Where a process's resident memory is (from `/proc/<pid>/smaps`): the allocator's
//! heap, other anonymous memory, mapped files. capacity-probe prints it to tell
//! memory the allocator keeps (fragmentation, per-thread caches) from memory the
//! program keeps mapped (registered regions, rings, stacks).

use std::fmt;

/// glibc's arenas other than the main one are heaps aligned to their maximum size
/// (64 MiB on 64-bit Linux): an anonymous mapping starting at such an address is one.
const ARENA_ALIGN: u64 = 64 << 20;

/// Resident memory of a process by kind, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RssParts {
    /// The allocator's heaps: `[heap]` (the main arena) and the other arenas.
    pub heap: u64,
    /// Other anonymous memory: registered regions, rings, stacks, large allocations.
    pub anon: u64,
    /// Mapped files (the program and its libraries).
    pub files: u64,
}

impl RssParts {
    /// Reads `/proc/<pid>/smaps`.
    pub fn of(pid: u32) -> std::io::Result<RssParts> {
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
        Ok(RssParts::parse(&smaps))
    }

    fn parse(smaps: &str) -> RssParts {
        #[derive(Clone, Copy)]
        enum Kind {
            Heap,
            Anon,
            File,
        }
        let mut parts = RssParts::default();
        let mut kind = Kind::Anon;
        for line in smaps.lines() {
            if let Some(kib) = line.strip_prefix("Rss:") {
                let kib: u64 = kib
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                match kind {
                    Kind::Heap => parts.heap += kib,
                    Kind::Anon => parts.anon += kib,
                    Kind::File => parts.files += kib,
                }
                continue;
            }
            // A mapping's header: `start-end perms offset dev inode [name]`.
            let mut fields = line.split_whitespace();
            let Some((start, _)) = fields.next().and_then(|r| r.split_once('-')) else {
                continue;
            };
            let Ok(start) = u64::from_str_radix(start, 16) else {
                continue; // a `Key: value` line
            };
            let name = fields.nth(4).unwrap_or("");
            kind = match name {
                "[heap]" => Kind::Heap,
                "" if start % ARENA_ALIGN == 0 => Kind::Heap,
                n if n.starts_with('/') => Kind::File,
                _ => Kind::Anon,
            };
        }
        parts
    }
}

impl fmt::Display for RssParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "heap {} KiB, other anonymous {} KiB, files {} KiB",
            self.heap, self.anon, self.files
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_are_told_apart_by_name_and_arena_alignment() {
        let smaps = "\
55d7c92d1000-55d7c952d000 r-xp 000d1000 fd:00 123 /usr/bin/server
Size:               2416 kB
Rss:                2092 kB
55d7cc995000-55d7cccfc000 rw-p 00000000 00:00 0 [heap]
Rss:                 424 kB
7f6764000000-7f6764e17000 rw-p 00000000 00:00 0
Rss:                 280 kB
7f676880b000-7f676af05000 rw-p 00000000 00:00 0
Rss:                2112 kB
7ffc0dba1000-7ffc0dbc2000 rw-p 00000000 00:00 0 [stack]
Rss:                  52 kB
";
        assert_eq!(
            RssParts::parse(smaps),
            RssParts {
                heap: 424 + 280,
                anon: 2112 + 52,
                files: 2092,
            }
        );
    }

    #[test]
    fn this_process_has_resident_memory_of_each_kind() {
        let parts = RssParts::of(std::process::id()).unwrap();
        assert!(parts.files > 0 && parts.anon + parts.heap > 0, "{parts}");
    }
}
