//! The testkit's schema registry as a process, for benchmarks and demos:
//! `cargo run -p sluice-testkit --example schema_registry` prints `http://127.0.0.1:PORT` and
//! serves until killed.

fn main() -> std::io::Result<()> {
    let r = sluice_testkit::registry::Registry::start()?;
    println!("{}", r.url());
    loop {
        std::thread::park();
    }
}
