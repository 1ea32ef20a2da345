//! Engine benchmarks (filled in below).

fn main() {
    divan::main();
}
