from validator.command import main

main()
