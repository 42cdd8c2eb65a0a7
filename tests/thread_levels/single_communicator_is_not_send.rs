// A communicator of a single-threaded rank cannot move to another thread.
fn must_be_send<T: Send>(_: T) {}

fn main() {
    ch4::threads::Threads::new(1)
        .run(|ctx| {
            must_be_send(ctx.world());
            Ok(())
        })
        .unwrap();
}
