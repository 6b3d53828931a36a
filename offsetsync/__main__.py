from offsetsync.app import main

main()
