//! Test harness shared by the integration tests: each helper starts a real server (MariaDB with
//! row binlog, a moto S3 server, an etcd member, a Kafka-protocol broker, a schema registry) in its own temp directory or thread on a free port and
//! stops it on drop. Nothing here is a mock.
//!
//! Layout rule: one file per server it starts, and two for the MariaDB replays: the corpus they
//! read (`mysqltest`: statements out of MariaDB's own regression suite) and the report they
//! write (`suite_report`); `process` holds what the server helpers share about their child;
//! `proxy` and `tls` put a fault-injecting or a TLS-terminating front before a server;
//! `scratch` is a test's own directory, removed when the test passed; `rng` the randomized tests'
//! generator.

pub mod etcd;
pub mod kafka;
pub mod mariadb;
pub mod moto;
pub mod mysqltest;
pub mod process;
pub mod proxy;
pub mod registry;
pub mod rng;
pub mod scratch;
pub mod suite_report;
pub mod tls;
