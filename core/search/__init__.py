"""One search call: the principal's mask, the two legs, fusion, and the records between stages."""
