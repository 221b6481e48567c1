//! CPU used by two soft devices with a connected RC QP pair that nobody polls: the
//! helper threads should sleep, not tick.
//!
//! `cargo run --release -p rpc-transport --example soft_idle`

use std::time::Duration;

use rpc_transport::{AccessFlags, Device, QpInitAttr, QpType, SoftConfig};

fn cpu_seconds() -> f64 {
    // SAFETY: `rusage` is plain data for which all-zero bytes are a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a live, writable `rusage`.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() {
    let open = || {
        let dev = Device::open_soft(SoftConfig::default()).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        (dev, pd, cq, qp)
    };
    let (a, b) = (open(), open());
    a.3.connect_rc(&b.3.endpoint(0).unwrap(), 0, AccessFlags::all())
        .unwrap();
    b.3.connect_rc(&a.3.endpoint(0).unwrap(), 0, AccessFlags::all())
        .unwrap();
    let start = cpu_seconds();
    std::thread::sleep(Duration::from_secs(3));
    println!(
        "idle CPU: {:.2}% of one core",
        (cpu_seconds() - start) / 3.0 * 100.0
    );
}
