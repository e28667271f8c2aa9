//! One error model: capture (upstream) and the sinks (downstream) classify a server error by its
//! code through the one table in `sluice_types::error_class`, so the same code is retried or
//! shown to the operator alike on both sides.

use sluice_capture::CaptureError;
use sluice_sink::SinkError;
use sluice_types::error_class::SERVER_CODES;
use sluice_types::ErrorClass;

fn server_error(code: u16) -> mysql_async::Error {
    mysql_async::Error::Server(mysql_async::ServerError {
        code,
        message: format!("error {code}"),
        state: "HY000".into(),
    })
}

fn classes(code: u16) -> (ErrorClass, ErrorClass) {
    let upstream = CaptureError::from_mysql(server_error(code)).class();
    let downstream = SinkError::db("apply rows", server_error(code)).class();
    (upstream, downstream)
}

#[test]
fn capture_and_sinks_classify_every_listed_code_as_the_table_says() {
    for c in SERVER_CODES {
        assert_eq!(classes(c.code), (c.class, c.class), "{} {}", c.code, c.name);
    }
}

#[test]
fn the_codes_they_once_disagreed_on_are_classified_alike() {
    // Deadlock, read-only during a failover, an aborted connection: retried on both sides.
    for code in [1213, 1290, 1152] {
        assert_eq!(
            classes(code),
            (ErrorClass::Retryable, ErrorClass::Retryable),
            "{code}"
        );
    }
    // A packet over max_allowed_packet is as large the next time; a code nobody listed (no such
    // table) is shown to the operator.
    for code in [1153, 1146] {
        assert_eq!(
            classes(code),
            (ErrorClass::Fatal, ErrorClass::Fatal),
            "{code}"
        );
    }
    assert!(matches!(
        CaptureError::from_mysql(server_error(1213)),
        CaptureError::Transient(_)
    ));
}
