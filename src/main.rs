fn main() {
    std::process::exit(yh_genie::cli::main());
}
