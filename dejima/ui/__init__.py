"""Terminal output. Only dejima.cli and dejima.ui write to the terminal."""
