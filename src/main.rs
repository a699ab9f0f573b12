fn main() {
    std::process::exit(yh_genie::programs::commands::main());
}
