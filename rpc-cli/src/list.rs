//! `rdma-rpc list`: the services, or one service's methods, one full name a line.

use crate::args::ListArgs;
use crate::connect::Connection;
use crate::fail::Fail;
use crate::schema::Schema;

pub(crate) async fn run(args: ListArgs) -> Result<(), Fail> {
    let connection = Connection::new(&args.target)?;
    let schema = Schema::load(&args.schema, &connection, None).await?;
    let lines: Vec<String> = match &args.service {
        None => schema.services.clone(),
        Some(name) => schema
            .service(name)?
            .methods()
            .map(|m| m.full_name().to_owned())
            .collect(),
    };
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
