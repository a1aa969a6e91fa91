"""The figures ``ringcomm-bench init`` measures, as its table shows them: (row key, column
heading, format). Apart from init_scale.py, which measures them, so that scale_model.py, which
predicts some of them, shows them under the same headings without importing the benchmark."""

COLUMNS = (
    ("ranks", "ranks", "{:d}"),
    ("hosts", "hosts", "{:d}"),
    ("init_s", "init (s)", "{:.2f}"),
    ("rendezvous_s", "rendezvous (s)", "{:.2f}"),
    ("connect_s", "connect (s)", "{:.2f}"),
    ("first_allreduce_ms", "1st allreduce (ms)", "{:.1f}"),
    ("rss_mib", "RSS/rank (MiB)", "{:.1f}"),
    ("fds", "fds/rank", "{:.1f}"),
    ("fds_max", "fds, most", "{:d}"),
    ("sockets", "sockets/rank", "{:.1f}"),
    ("sockets_after_first", "sockets/rank after 1st allreduce", "{:.1f}"),
    ("second_allreduce_ms", "2nd allreduce (ms)", "{:.1f}"),
    ("store_requests", "store reqs", "{:d}"),
    ("store_request_ms", "store req (ms)", "{:.2f}"),
    ("rendezvous_requests", "of which rendezvous", "{:d}"),
    ("shm_requests", "of which shm setup", "{:d}"),
    ("sent_kib", "sent/rank, median (KiB)", "{:.1f}"),
    ("recovery_s", "kill -> next (s)", "{:.2f}"),
    ("detect_s", "of which detection (s)", "{:.2f}"),
    ("shrink_s", "of which shrink (s)", "{:.2f}"),
    ("gloo_init_s", "gloo init (s)", "{:.2f}"),
    ("gloo_first_allreduce_ms", "gloo 1st allreduce (ms)", "{:.1f}"),
    ("gloo_sockets", "gloo sockets/rank", "{:.1f}"),
)
