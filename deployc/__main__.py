from deployc.launch import entry

entry()
