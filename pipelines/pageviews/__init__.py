"""Page views per page and minute: a generator produces JSON page-view events keyed by user
into a seglog topic; a Structured Streaming job reads them with the seglog source, parses
them, counts views per page in one-minute event-time windows with a watermark for late
events, and writes each closed window to a seglog topic and to Parquet; a batch job re-reads
a time range of the topic (a backfill) and computes the same figures.

    make run                                   # a local cluster, in another terminal
    make pipeline                              # or: python -m pipelines.pageviews --help
"""
