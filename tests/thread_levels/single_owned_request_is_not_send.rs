// An owned request of a single-threaded rank cannot be waited for on another thread.
fn main() {
    ch4::threads::Threads::new(1)
        .run(|ctx| {
            let world = ctx.world();
            let req = world.irecv_owned(vec![0u8; 4], 0, 0)?;
            std::thread::spawn(move || req.wait()).join().unwrap();
            Ok(())
        })
        .unwrap();
}
