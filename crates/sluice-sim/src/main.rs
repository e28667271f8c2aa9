//! `sluice-sim`: runs scenario files (`run`) and random explorations (`explore`).

fn main() {
    eprintln!("sluice-sim: not implemented yet");
    std::process::exit(2);
}
