"""What every command shares: file input and output, where outputs may go, errors, options, progress bars."""
