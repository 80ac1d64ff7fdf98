use clap::Parser;

fn main() {
    let cli = torchtop::cli::Cli::parse();
    println!("{cli:?}");
}
