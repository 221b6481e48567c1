//! The host identity a `HELLO` carries: equal on both ends only if they run on the
//! same boot of the same kernel, in the same network namespace, as the same user.
//!
//! It is a fingerprint (FNV-1a of `/proc/sys/kernel/random/boot_id`, the inode of
//! `/proc/self/ns/net` and the uid), so a match is only a hint that shared memory may
//! work: the kernel decides. The abstract Unix socket the peers then meet on exists
//! only inside one network namespace of one host, and `SO_PEERCRED` on it names the
//! peer's uid. A mismatch (or an identity that cannot be read: 0) keeps TCP.

use std::sync::OnceLock;

/// This process's identity; 0 if any part could not be read.
pub(crate) fn host_identity() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(|| compute().unwrap_or(0))
}

fn compute() -> Option<u64> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let netns = std::fs::read_link("/proc/self/ns/net").ok()?;
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mut h = Fnv::new();
    h.write(boot.trim().as_bytes());
    h.write(netns.as_os_str().as_encoded_bytes());
    h.write(&uid.to_be_bytes());
    // 0 means "no identity": never produce it for a real one.
    Some(h.0.max(1))
}

/// FNV-1a, 64 bits: stable across processes and compilers (unlike `DefaultHasher`).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two reads in one process agree and are not the "unknown" value (this machine
    /// has /proc).
    #[test]
    fn identity_is_stable_and_known() {
        let a = compute().expect("/proc/sys/kernel/random/boot_id and /proc/self/ns/net");
        assert_ne!(a, 0);
        assert_eq!(a, host_identity());
    }
}
