from tests.promql_names import metric_names


def test_names_are_found_and_labels_functions_and_durations_are_not():
    expression = (
        "histogram_quantile(0.99, sum by (le, seglog_request) "
        '(rate(seglog_request_duration_seconds_bucket{seglog_request="Produce"}[5m]))) '
        "> 1 and on (instance) max without (job) (seglog_partitions_offline offset 1h) "
        '/ ignoring(x) group_left(y) up{job=~"seglog.*"} unless count(foo:bar_total)'
    )
    assert metric_names(expression) == {
        "seglog_request_duration_seconds_bucket",
        "seglog_partitions_offline",
        "up",
        "foo:bar_total",
    }


def test_a_bare_name_with_a_matcher_and_a_subquery_is_one_name():
    assert metric_names('max_over_time(seglog_consumer_lag{a="by (b)"}[10m:1m]) > 5e3') == {
        "seglog_consumer_lag"
    }
