"""detcheck history: a suite over a range of revisions, each measured once; exact figures
compared between neighbours, noisy series judged by change-point detection (ruptures), each
change point confirmed by a paired run; a static dashboard and a JSON feed (docs/HISTORY.md)."""
