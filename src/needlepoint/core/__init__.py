"""The ground floor: helpers that import nothing of needlepoint above them (the one file writer, JSON
lines, numbers, boxes and IoU, text, images, credentials, errors, records, process forks) and the run's
settings (`config`) and folder format (`store`)."""
