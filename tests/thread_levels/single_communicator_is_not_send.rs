// A communicator of a single-threaded rank cannot move to another thread.
fn main() {
    ch4::threads::Threads::new(1)
        .run(|ctx| {
            let world = ctx.world();
            std::thread::spawn(move || world.rank()).join().unwrap();
            Ok(())
        })
        .unwrap();
}
