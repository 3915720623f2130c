fn main() {
    println!("ok");
}
