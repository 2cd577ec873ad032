"""FAO-56 chapter 8's Example 37 as published (Allen et al. 1998, p. 168), shared by the
tests that run it through the pure balance and through the whole path, and the p fed to
the service so that its day's p is the example's (docs/waterbalance.md)."""

from __future__ import annotations


def table_p(p: float, etc: float) -> float:
    """The Table 22 p (at ETc 5 mm/day) that the service adjusts to `p` on a day of `etc`."""
    return p - 0.04 * (5.0 - etc)


# Example 37: full grown tomato, Zr 0.8 m, p 0.40, silty soil theta_fc 0.32, theta_wp 0.12,
# ET0 5 mm/day, Kc 1.2, no rain or irrigation, initial depletion 55 mm. Published columns
# (5) Dr start, (6) Ks, (7) ETc adj, (8) Dr end, days 1-10.
EX37 = [
    (55.0, 1.00, 6.0, 61.0), (61.0, 1.00, 6.0, 67.0), (67.0, 0.97, 5.8, 72.8),
    (72.8, 0.91, 5.4, 78.3), (78.3, 0.85, 5.1, 83.4), (83.4, 0.80, 4.8, 88.2),
    (88.2, 0.75, 4.5, 92.6), (92.6, 0.70, 4.2, 96.9), (96.9, 0.66, 3.9, 100.8),
    (100.8, 0.62, 3.7, 104.5),
]
