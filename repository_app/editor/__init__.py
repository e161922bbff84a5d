"""The config.pbtxt editor: form and text modes, atomic saves with history."""
