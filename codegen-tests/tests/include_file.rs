//! `Builder::include_file`, as tonic-prost-build's: one `include!` brings in every
//! package the build script compiled, nested by package name (`a.b.c` as
//! `a::b::c`), a file without a package at the top (`codegen_tests::all`).

use codegen_tests::all;

#[test]
fn every_package_is_reachable_through_the_include_file() {
    let hello = all::helloworld::HelloRequest { name: "n".into() };
    assert_eq!(hello.name, "n");
    assert_eq!(all::a::b::c::Item::default(), Default::default());
    assert_eq!(all::Bare::default(), Default::default());
    assert_eq!(all::kv::Entry::default(), Default::default());
    let _client =
        all::helloworld::greeter_client::GreeterClient::<rpc_core::transport::Channel>::new;
}
