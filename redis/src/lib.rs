//! rndb-redis: an API node that serves the Redis protocol.
#![forbid(unsafe_code)]
