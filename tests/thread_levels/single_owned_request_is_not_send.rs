// An owned request of a single-threaded rank cannot be waited for on another thread.
fn must_be_send<T: Send>(_: T) {}

fn main() {
    ch4::threads::Threads::new(1)
        .run(|ctx| {
            let req = ctx.world().irecv_owned(vec![0u8; 4], 0, 0)?;
            must_be_send(req);
            Ok(())
        })
        .unwrap();
}
