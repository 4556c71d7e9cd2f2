"""Reading raw DrivAerML runs and reading and writing processed runs."""
